"""xmfu's Triton GEMM on each GPU target: what `available()` offers, checked against what Triton 3.9's own front end
compiles for that target (tests/workloads/triton_front_end.py lowers the real kernel to TTIR without a GPU)."""

from __future__ import annotations

import pytest

from tests.conftest import gpu_device, run_config
from tests.fakes.fake_gpu import fake_gpu
from tests.workloads.triton_front_end import compile_errors
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import compat
from xmfu.harness.machine.platform import Platform
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
    constants = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "INPUT_PRECISION": precision,
                 "UPCAST": False}
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
    assert offered == {"gfx90a": False, "gfx942": True, "gfx950": False, "sm75": False, "sm80": True, "sm90": True}
