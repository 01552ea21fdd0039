"""torch.matmul: cuBLAS(Lt) on NVIDIA, hipBLASLt/rocBLAS on AMD, oneDNN/MKL/OpenBLAS on a CPU."""

from __future__ import annotations

from functools import partial

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import to_torch, torch_rows, torch_unavailable
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.tf32 import torch_tf32_on
from xmfu.workloads.matmul.spec import MatmulCase, fp8_mismatch

# torch's matmul precision setting decides whether "fp32" may use TF32 tensor cores: pinned to "highest" for fp32;
# tf32 is asked for and read back (machine/tf32.py).
FP8_ARCHES = ("gfx942", "gfx950")


def available(case: MatmulCase, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind, ctx.device.arch)
    if why:
        return False, why
    if case.dtype == "fp8":
        why = _fp8_unavailable(case, ctx.platform.kind, ctx.device)
        if why:
            return False, why
    return True, ""


def _fp8_unavailable(case: MatmulCase, kind: str, device: DeviceInfo) -> str | None:
    cc = tuple(int(x) for x in (device.compute_capability or "0.0").split("."))
    arch_ok = kind == "rocm" and (device.arch or "").startswith(FP8_ARCHES)
    if not ((kind == "cuda" and cc >= (8, 9)) or arch_ok):
        return "fp8 matmul (torch._scaled_mm) needs NVIDIA compute capability 8.9+ or AMD gfx942/gfx950"
    mismatch = fp8_mismatch(case, kind, device)
    if mismatch:
        return mismatch
    if case.k % 16 or case.n % 16:  # aten ScaledBlas.cpp: mat1 columns and both mat2 dims divisible by 16
        return f"torch._scaled_mm needs K and N multiples of 16 (K={case.k}, N={case.n})"
    return None


def _operands(case: MatmulCase, ctx: RunContext) -> list[tuple]:
    ops = case.operands()  # fp8: spec.FP8_LAYOUT, A row-major and B column-major, as _scaled_mm asks
    copies = ctx.input_copies(case.input_bytes())
    a0 = to_torch(ops.a, case.dtype, ctx.torch_device, case.fp8_format)
    b0 = to_torch(ops.b, case.dtype, ctx.torch_device, case.fp8_format)
    pairs = [(a0, b0)] + [(a0.clone(), b0.clone()) for _ in range(copies - 1)]
    # Transposed storage is used through a view, so the library sees the layout flag, not a copy.
    return [ops.used(a, b) for a, b in pairs]


def _fp8_call(a, b):
    import torch

    one = torch.ones((), device=a.device, dtype=torch.float32)
    return partial(torch._scaled_mm, a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    import torch

    tf32_state = None
    if case.dtype == "tf32":  # HIPBLASLT_ALLOW_TF32 on ROCm, then what torch says it will do decides
        tf32_state, why = torch_tf32_on(torch, ctx.platform.kind)
        if why:
            raise Unavailable(why)
    elif case.dtype == "fp32":
        torch.set_float32_matmul_precision("highest")
    pairs = _operands(case, ctx)
    if case.dtype == "fp8":
        calls = [_fp8_call(a, b) for a, b in pairs]
    else:
        calls = [partial(torch.matmul, a, b) for a, b in pairs]
    check_call = calls[0]

    def result(rows: np.ndarray | None) -> np.ndarray:
        return torch_rows(check_call(), rows)

    held = case.operands()
    flags = (held.transpose_a, held.transpose_b)  # how the held tensors are viewed (fp8: FP8_LAYOUT)

    def fresh_inputs(new: MatmulCase) -> None:  # timing.fresh_inputs: new values into the same buffers
        fresh = new.operands()
        for tensor, values, transposed in zip(pairs[0], (fresh.a, fresh.b), flags, strict=True):
            (tensor.T if transposed else tensor).copy_(to_torch(values, case.dtype, ctx.torch_device, case.fp8_format))

    notes = {"library": "torch._scaled_mm" if case.dtype == "fp8" else "torch.matmul",
             "fp32_matmul_precision": torch.get_float32_matmul_precision(), "input_copies": len(calls),
             "torch_threads": torch.get_num_threads() if ctx.platform.kind == "cpu" else None}
    if case.dtype == "fp8":
        notes.update(fp8_format=case.fp8_format, fp8_layout=case.operands().fp8_layout)
    if tf32_state is not None:
        notes["tf32"] = tf32_state
    return Prepared(rotate(calls), result, "torch", notes=notes, output=torch_rows, fresh_inputs=fresh_inputs)
