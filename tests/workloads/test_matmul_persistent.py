"""xmfu's persistent Triton GEMM (kernels/matmul_persistent.py, issue 27 section 3): both kernels (plain pointers,
tensor descriptors) in the interpreter at odd sizes, K a multiple of BLOCK_K and not; the XCD remap; the EVEN_K
specialisation and both targets in Triton's own front end; the backend's kernel choice and notes."""

from __future__ import annotations

import pytest
import torch
import triton

from xmfu.harness.machine import compat

if compat.triton_interpreter_too_old():
    pytest.skip(compat.triton_interpreter_too_old(), allow_module_level=True)

from tests.workloads.triton_front_end import compiled
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.kernels import matmul_persistent as gemm
from xmfu.kernels import matmul_persistent_configs
from xmfu.workloads.matmul import triton_persistent as backend

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}  # output rounding: 2**-11 (fp16), 2**-8 (bf16)


def _check(m: int, n: int, k: int, dtype: str, use_tma: bool, transposed: bool = False, **plan) -> gemm.Plan:
    g = torch.Generator().manual_seed(0)
    a, b = (torch.rand(shape, generator=g) * 2 - 1 for shape in ((m, k), (k, n)))
    a, b = a.to(DTYPES[dtype]), b.to(DTYPES[dtype])
    if transposed:  # stored (K, M) and (N, K): columns contiguous
        a, b = a.T.contiguous().T, b.T.contiguous().T
    out = torch.full((m, n), float("nan"), dtype=DTYPES[dtype])  # a tile never written stays NaN
    chosen = gemm.plan(a, b, out, use_tma=use_tma, **plan)
    gemm.matmul(a, b, out, "ieee" if dtype == "fp32" else None, chosen)
    ref = a.double() @ b.double()
    error = float((out.double() - ref).abs().max() / ref.abs().max())
    assert error < TOLERANCE[dtype], (chosen, error)
    return chosen


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("k", [100, 128])  # a full K step and the masked tail, and EVEN_K (BLOCK_K 64 here)
def test_pointer_kernel_at_odd_sizes(dtype, k):
    chosen = _check(130, 70, k, dtype, use_tma=False)
    assert chosen.kernel == "pointer" and chosen.num_sms == gemm.INTERPRETER_SMS  # 3 x 2 tiles over 2 programs


# 16-byte aligned rows, M and N off the 64-element tiles; K 112 (the tail past BLOCK_K is the descriptors' zero
# padding) and 128 (whole K tiles)
@pytest.mark.parametrize(("dtype", "k"), [("fp32", 112), ("fp16", 128), ("bf16", 112)])
def test_descriptor_kernel_at_odd_sizes(dtype, k):
    assert _check(130, 72, k, dtype, use_tma=True).kernel == "tma"


@pytest.mark.parametrize("use_tma", [False, True])
def test_both_kernels_take_column_major_operands(use_tma):
    assert _check(136, 72, 112, "fp16", use_tma=use_tma, transposed=True).kernel == ("tma" if use_tma else "pointer")


def test_unaligned_rows_fall_back_to_the_pointer_kernel_and_say_why():
    chosen = _check(67, 45, 33, "fp16", use_tma=True)  # 33 fp16 = 66 bytes a row
    assert chosen.kernel == "pointer" and "16-byte" in chosen.why


def test_the_xcd_remap_computes_every_tile_when_there_are_fewer_tiles_than_programs():
    """The remap permutes 0..NUM_SMS-1 only over a grid of exactly NUM_SMS programs: with 9 tiles and 16 programs
    on 4 dies, program 1 becomes 4, 3 becomes 12... and a grid cut to the tile count would leave tiles 3, 6, 7 NaN."""
    assert _check(130, 130, 64, "fp32", use_tma=False, num_sms=16, num_xcds=4).num_xcds == 4
    assert _check(200, 130, 64, "fp32", use_tma=False, num_sms=8, num_xcds=4).num_xcds == 4  # 12 tiles: 2 rounds


def test_no_remap_where_the_dies_do_not_share_the_programs_equally():
    a = torch.empty(8, 8)
    assert gemm.plan(a, a, a, num_sms=10, num_xcds=4).num_xcds == 1


POINTER_INTS = ("M", "N", "K", "stride_am", "stride_bk", "stride_cm")  # unit strides: constants, as a launch has them
DIVISIBLE = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"]  # by 16: 4096^3


def _pointer_case(device: str, even_k: bool) -> dict:
    nvidia = device.startswith("sm")
    return {"kernel": "_persistent_kernel", "device": device, "divisible": DIVISIBLE if even_k else DIVISIBLE[:-4],
            "compile": {"num_warps": 8, "num_stages": 3 if nvidia else 2},
            "signature": {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", **{n: "i32" for n in POINTER_INTS}},
            "constants": {"BLOCK_M": 128, "BLOCK_N": 128 if nvidia else 256, "BLOCK_K": 64, "GROUP_M": 8,
                          "NUM_SMS": 132 if nvidia else 304, "NUM_XCDS": 1 if nvidia else 8, "FLATTEN": nvidia,
                          "EVEN_K": even_k, "INPUT_PRECISION": None, "UPCAST": False, "INT64": False,
                          "FP8_WGMMA": False, "IMPRECISE": 0, "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}}


def _tma_case(colmajor: bool, dtype: str = "bf16") -> dict:
    a, b = (f"{dtype}[64, 128]", f"{dtype}[128, 64]") if colmajor else (f"{dtype}[128, 64]", f"{dtype}[64, 128]")
    fp8 = dtype.startswith("fp8")
    return {"kernel": "_persistent_tma_kernel", "device": "sm90", "divisible": ["M", "N", "K"],
            "compile": {"num_warps": 8, "num_stages": 3},
            "signature": {"a_desc": f"tensordesc<{a}>", "b_desc": f"tensordesc<{b}>",
                          "c_desc": "tensordesc<bf16[128, 128]>", "M": "i32", "N": "i32", "K": "i32"},
            "constants": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "NUM_SMS": 132,
                          "FLATTEN": True, "A_COLMAJOR": colmajor, "B_COLMAJOR": colmajor, "INPUT_PRECISION": None,
                          "UPCAST": False, "DTYPES": f"{dtype}->bf16", "FP8_WGMMA": fp8, "IMPRECISE": 64 if fp8 else 0}}


def _masked_loads(ttir: str) -> int:
    """tt.load with a mask operand: `tt.load %ptr, %mask, %other`."""
    return sum(1 for line in ttir.splitlines() if "tt.load " in line and "," in line.split("tt.load ")[1].split(":")[0])


@pytest.mark.long  # the slow group (make test-slow): Triton's whole compiler, seven kernels, 11-16 s here
@pytest.mark.slow(seconds=30)  # Triton's whole compiler, seven kernels, one process
def test_both_kernels_compile_for_hopper_and_mi300_as_the_structure_says():
    """Triton 3.9's compiler to a cubin (sm90) and an hsaco (gfx942), on this CPU. EVEN_K: no masked load; otherwise
    only the peeled K tail masks A and B. The pointer kernel's K loop is pipelined (cp.async copies into shared
    memory) under the flattened tile loop; the descriptor kernel loads by TMA and multiplies by wgmma, both layouts
    and fp8 too (promoted every 64 products: with max_num_imprecise_acc=0 Triton would fall back to mma.sync);
    gfx942 (8-XCD remap, 256x128 tiles) multiplies by MFMA."""
    cases = [_pointer_case(d, even) for d in ("sm90", "gfx942") for even in (True, False)]
    cases += [_tma_case(False), _tma_case(True), _tma_case(False, "fp8e4nv")]
    results = compiled("xmfu.kernels.matmul_persistent", cases)
    assert [r["error"] for r in results] == [None] * 7
    assert [r["binary"] for r in results] == ["cubin", "cubin", "hsaco", "hsaco", "cubin", "cubin", "cubin"]
    assert [_masked_loads(r["ttir"]) for r in results[:4]] == [0, 2, 0, 2]
    assert "async_copy_global_to_local" in results[0]["ttgir"]  # the sm90 EVEN_K case: pipelined
    assert all("async_tma_copy_global_to_local" in r["ttgir"] and "warp_group_dot" in r["ttgir"]
               for r in results[4:])
    assert "maxNumImpreciseAcc = 64" in results[6]["ttir"]
    assert all("#ttg.amd_mfma" in r["ttgir"] for r in results[2:4])  # the dot in an MFMA layout


def test_configs_follow_tutorial_09_and_amds_guidance():
    nvidia = [c.kwargs for c in matmul_persistent_configs.nvidia_configs()]
    amd = [c.kwargs for c in matmul_persistent_configs.amd_configs()]
    # tutorial 09's BLOCK_K 64 and 128 and ROCm's 64, and the 32-deep tiles tf32 fits (kernels/fit.py)
    assert {k["BLOCK_K"] for k in nvidia} == {32, 64, 128} and all("waves_per_eu" not in k for k in nvidia)
    assert {k["BLOCK_K"] for k in amd} == {32, 64} and all("waves_per_eu" in k for k in amd)
    assert [k for k in nvidia + amd if k["BLOCK_K"] == 32] == [
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}] * 2 + [
        {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
        {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 4, "waves_per_eu": 2, "matrix_instr_nonkdim": 16,
         "kpack": 1}]
    edges = [k[e] for k in nvidia + amd for e in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
    assert max(edges) <= gemm.TILE_MAX


def test_tma_only_on_nvidia_sm90_and_later(monkeypatch):
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert gemm.device_has_tma(cuda)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert not gemm.device_has_tma(cuda)
    monkeypatch.setattr(torch.version, "hip", "6.4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 4))  # gfx942 reports 9.4
    assert not gemm.device_has_tma(cuda) and not gemm.device_has_tma(torch.device("cpu"))


def _amd(arch: str, cus: int) -> DeviceInfo:
    return DeviceInfo("rocm", "AMD Instinct", "AMD", multiprocessors=cus, arch=f"{arch}:sramecc+:xnack-")


@pytest.mark.parametrize(("device", "xcds"), [
    (_amd("gfx942", 304), 8),  # MI300X, MI325X
    (_amd("gfx942", 228), 6),  # MI300A
    (_amd("gfx950", 256), 8),  # MI355X, MI350X
    (_amd("gfx942", 38), 1),  # one XCD of a CPX partition
    (_amd("gfx942", 80), 1),  # not whole 38-CU dies: unknown, no remap
    (_amd("gfx90a", 104), 1),  # MI250X GCD: one die
    (DeviceInfo("cuda", "NVIDIA H100", "NVIDIA", multiprocessors=132, compute_capability="9.0"), 1),
])
def test_xcd_count(device, xcds):
    count, why = backend.xcd_count(device)
    assert count == xcds and why


def test_backend_row_says_which_kernel_ran(cpu_ctx):
    from xmfu.workloads.matmul.spec import MatmulCase

    case = MatmulCase(67, 45, 33, "bf16")
    assert backend.available(case, cpu_ctx) == (True, "")
    prepared = backend.prepare(case, cpu_ctx)
    prepared.fn()
    assert case.check(prepared.result(case.check_rows())).ok
    notes = prepared.notes
    assert notes["kernel"] == "persistent, pointers" and "compute capability 9.0" in notes["kernel_choice"]
    assert notes["programs"] == gemm.INTERPRETER_SMS and notes["xcd_remap"].startswith("off")
    assert notes["autotune_config"] and not notes["int64_offsets"] and notes["tile_loop"] == "a plain loop"
    assert notes["triton"] == triton.__version__
    assert prepared.timing_valid is False and "interpreter" in prepared.timing_note


def test_the_tile_loop_is_flattened_on_nvidia_only(monkeypatch):
    """Tutorial 09 flattens on NVIDIA; ROCm's persistent_gemm does not; Triton's interpreter has no such pass."""
    a = torch.empty(8, 8)
    assert not gemm.plan(a, a, a, num_sms=4).flatten  # the interpreter
    monkeypatch.setattr(gemm, "interpreting", lambda: False)
    monkeypatch.setattr(torch.version, "hip", None)
    assert gemm.plan(a, a, a, num_sms=4).flatten is gemm.RANGE_FLATTENS
    monkeypatch.setattr(torch.version, "hip", "6.4")
    assert not gemm.plan(a, a, a, num_sms=4).flatten
