"""xmfu's Triton GEMM on each GPU target: what `available()` offers, checked against what Triton 3.9's own front end
compiles for that target (tests/workloads/triton_front_end.py lowers the real kernel to TTIR without a GPU)."""

from __future__ import annotations

import pytest

from tests.conftest import gpu_device, run_config
from tests.fakes.fake_gpu import fake_gpu
from tests.workloads.triton_front_end import compile_errors, compiled, lowered
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import compat
from xmfu.harness.machine.platform import Platform
from xmfu.workloads.matmul import spec
from xmfu.workloads.matmul import triton as triton_backend
from xmfu.workloads.matmul.spec import MatmulCase

if compat.triton_interpreter_too_old():
    pytest.skip(compat.triton_interpreter_too_old(), allow_module_level=True)


def _amd(name: str, arch: str, cc: str):
    return gpu_device(name, 256, kind="rocm", vendor="amd", arch=f"{arch}:sramecc+:xnack-", compute_capability=cc)


DEVICES = {  # target name as Triton spells it -> the device as xmfu's platform detection reports it
    "gfx90a": _amd("AMD Instinct MI250X", "gfx90a", "9.0"),
    "gfx942": _amd("AMD Instinct MI300X", "gfx942", "9.4"),
    "gfx950": _amd("AMD Instinct MI355X", "gfx950", "9.5"),
    "sm75": gpu_device("Tesla T4", 40, compute_capability="7.5"),
    "sm80": gpu_device("NVIDIA A100-SXM4-80GB", 108, compute_capability="8.0"),
    "sm89": gpu_device("NVIDIA L4", 58, compute_capability="8.9"),
    "sm90": gpu_device("NVIDIA H100 80GB HBM3", 132, compute_capability="9.0"),
}
INT_ARGS = ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")


def _available(case: MatmulCase, device) -> tuple[bool, str]:
    ctx = RunContext(run_config(dtype=case.dtype), Platform(device.kind, (device,), "test"))
    with fake_gpu(0, device.kind):
        return triton_backend.available(case, ctx)


def _gemm(device: str, operand: str, output: str, precision: str | None) -> dict:
    signature = {"a_ptr": f"*{operand}", "b_ptr": f"*{operand}", "c_ptr": f"*{output}",
                 **{name: "i32" for name in INT_ARGS}}
    from xmfu.kernels import matmul as gemm  # after the module's skip: an old Triton's autotuner wants a GPU

    fp8_wgmma = operand.startswith("fp8") and device.startswith("sm")  # as kernels/matmul.py fp8_promotes
    constants = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "INPUT_PRECISION": precision,
                 "UPCAST": False, "INT64": False, "FP8_WGMMA": fp8_wgmma,
                 "IMPRECISE": gemm._imprecise({"BLOCK_K": 32, "FP8_WGMMA": fp8_wgmma})}
    return {"device": device, "signature": signature, "constants": constants}


def test_tf32_is_offered_only_where_triton_compiles_it_for_tensor_cores():
    errors = dict(zip(DEVICES, compile_errors("xmfu.kernels.matmul", "_matmul_kernel",
                                              [_gemm(d, "fp32", "fp32", "tf32") for d in DEVICES]), strict=True))
    # Triton 3.9 itself: AMD takes tf32 on gfx942 only (backends/amd/compiler.py), NVIDIA on every target.
    assert {d for d, e in errors.items() if e} == {"gfx90a", "gfx950"}
    assert "input_precision must be one of" in errors["gfx950"]
    offered = {}
    for name, device in DEVICES.items():
        ok, why = _available(MatmulCase(256, 256, 256, "tf32"), device)
        offered[name] = ok
        assert ok or why
        if errors[name]:
            assert not ok and "gfx942" in why, (name, why)  # skipped with the reason, never a compile failure
    assert offered == {"gfx90a": False, "gfx942": True, "gfx950": False, "sm75": False, "sm80": True, "sm89": True,
                       "sm90": True}


FP8 = {"e4m3fn": "fp8e4nv", "e4m3fnuz": "fp8e4b8"}  # Triton's names (triton/_utils.py, torch dtype -> Triton type)


def test_fp8_is_offered_where_triton_compiles_the_devices_format_natively():
    cases = [spec.for_device([MatmulCase(256, 256, 256, "fp8")], device)[0] for device in DEVICES.values()]
    results = lowered("xmfu.kernels.matmul", "_matmul_kernel",
                      [_gemm(name, FP8[case.fp8_format], "bf16", None) for name, case in zip(DEVICES, cases,
                                                                                             strict=True)])
    errors = {name: r["error"] for name, r in zip(DEVICES, results, strict=True)}
    # Triton 3.9 itself: NVIDIA takes fp8e4nv from sm89 (backends/nvidia/compiler.py); AMD lists every fp8 type.
    assert {d for d, e in errors.items() if e} == {"sm75", "sm80"} and "fp8e4nv" in errors["sm80"]
    offered = {}
    for (name, device), case in zip(DEVICES.items(), cases, strict=True):
        ok, why = _available(case, device)
        offered[name] = ok
        assert ok or why
        if errors[name]:
            assert not ok and "8.9" in why, (name, why)
    # gfx90a would compile (Triton emulates fp8 there) but has no fp8 matrix units: skipped, not timed as fp8
    assert offered == {"gfx90a": False, "gfx942": True, "gfx950": True, "sm75": False, "sm80": False, "sm89": True,
                       "sm90": True}
    # no whole-K reduced-precision fp8 accumulation on Hopper (Triton's default there is 2**30), as torch._scaled_mm:
    # promoted every min(128, BLOCK_K) products (Triton prints the attribute only when it is not 0)
    dots = [line for line in results[list(DEVICES).index("sm90")]["ttir"].splitlines() if "tt.dot" in line]
    assert dots and all("f8E4M3FN" in d and "maxNumImpreciseAcc = 32" in d for d in dots), dots


@pytest.mark.long  # the slow group (make test-slow): Triton's whole compiler to a cubin, twice
@pytest.mark.slow(seconds=20)
def test_fp8_multiplies_by_wgmma_on_hopper():
    """Compiled for sm90 through ptxas, one of the NVIDIA configs (128x256x64, 8 warps, 3 stages) on fp8 operands
    as the workload stores them (A row-major, B (K, N) row-major): the PTX multiplies by wgmma with the kernel's
    max_num_imprecise_acc (min(128, BLOCK_K) = 64); with 0, which it passed before, Triton refuses wgmma
    (supportMMA) and the PTX has mma.sync on operands widened to fp16."""
    def case(imprecise: int) -> dict:
        ints = ("M", "N", "K", "stride_am", "stride_bk", "stride_cm")
        return {"kernel": "_matmul_kernel", "device": "sm90", "compile": {"num_warps": 8, "num_stages": 3},
                "signature": {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", **{n: "i32" for n in ints}},
                "constants": {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BLOCK_M": 128, "BLOCK_N": 256,
                              "BLOCK_K": 64, "GROUP_M": 8, "INPUT_PRECISION": None, "UPCAST": False, "INT64": False,
                              "FP8_WGMMA": imprecise > 0, "IMPRECISE": imprecise},
                "divisible": ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"]}

    from xmfu.kernels import matmul as gemm

    ours = gemm._imprecise({"BLOCK_K": 64, "FP8_WGMMA": True})
    assert ours == 64
    now, before = compiled("xmfu.kernels.matmul", [case(ours), case(0)])
    assert now["error"] is None and "wgmma.mma_async" in now["ptx"] and "mma.sync" not in now["ptx"]
    assert before["error"] is None and "wgmma" not in before["ptx"] and "mma.sync" in before["ptx"]
