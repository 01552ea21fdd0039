"""xmfu's own Triton GEMM (kernels/matmul.py); on a CPU it runs in Triton's interpreter for correctness."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import (
    TRITON_INTERPRETER_NOTE,
    to_torch,
    torch_dtype,
    torch_rows,
    triton_unavailable,
)
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.workloads.matmul.spec import MatmulCase, fp8_gemm_refused

INPUT_PRECISION = {"fp32": "ieee", "tf32": "tf32"}  # other dtypes: Triton's default for the target
OUTPUT_DTYPE = {"fp8": "bf16"}


def available(case: MatmulCase, ctx: RunContext) -> tuple[bool, str]:
    kind = ctx.platform.kind
    why = triton_unavailable(kind)
    if why:
        return False, why
    if case.dtype == "fp8":
        why = fp8_unavailable(case, kind, ctx.device)
        if why:
            return False, why
    if case.dtype == "tf32":
        why = tf32_unavailable(kind, ctx.device)
        if why:
            return False, why
    cc = tuple(int(x) for x in (ctx.device.compute_capability or "9.0").split("."))
    if kind == "cuda" and case.dtype == "bf16" and cc < (8, 0):
        return False, f"bf16 tl.dot needs compute capability 8.0+, this device is {ctx.device.compute_capability}"
    return True, ""


# Where tl.dot takes input_precision="tf32" in Triton 3.9. NVIDIA's backend allows it on every target
# (backends/nvidia/compiler.py, CUDAOptions.allowed_dot_input_precisions), but TF32 tensor cores start at sm80.
# AMD's allows only ("ieee", "bf16x3", "bf16x6") and adds "tf32" when `self.target.arch == 'gfx942'`
# (backends/amd/compiler.py, HIPOptions / parse_options, "Enable XF32 (TF32) for CDNA3 GPUs"): on gfx950
# (MI350X/MI355X) or gfx90a the kernel fails to compile ("input_precision must be one of ...").
TF32_AMD_ARCHES = ("gfx942",)


# fp8 tl.dot in Triton 3.9. NVIDIA's backend adds e4m3 ("fp8e4nv", torch.float8_e4m3fn) to the supported fp8 types
# from capability 89 (backends/nvidia/compiler.py, CUDAOptions.supported_fp8_dtypes). AMD's lists them all but runs
# OCP fp8 natively "since CDNA4" (gfx950) and the fnuz types ("fp8e4b8", torch.float8_e4m3fnuz) natively on CDNA3
# (gfx942), emulating the rest (HIPOptions comment); on gfx950 it upcasts fnuz dot operands to fp16
# (deprecated_fp8_dot_operand_dtypes, language/semantic.py dot). The device's format (machine/dtypes.fp8_format) is
# the native one on both, and parts without fp8 matrix units (gfx90a) are skipped rather than emulated.
FP8_AMD_ARCHES = ("gfx942", "gfx950")


def fp8_unavailable(case: MatmulCase, kind: str, device: DeviceInfo) -> str | None:
    """Why xmfu's Triton GEMM cannot take this fp8 case on `device`, or None (the interpreter takes it on a CPU).
    Triton: fp8e4nv from compute capability 8.9; AMD native fp8 on gfx942 (fnuz) and gfx950 (OCP)."""
    return fp8_gemm_refused(case, kind, device, engine="Triton's tl.dot", min_cc=(8, 9), amd_arches=FP8_AMD_ARCHES)


def tf32_unavailable(kind: str, device: DeviceInfo) -> str | None:
    """Why xmfu's Triton GEMM cannot take tf32 on `device`, or None."""
    if kind == "cpu":
        return "tf32 needs GPU tensor cores; the Triton interpreter has none"
    if kind == "cuda":
        cc = device.compute_capability
        if cc is not None and tuple(int(x) for x in cc.split(".")) < (8, 0):
            return f"tf32 needs NVIDIA compute capability 8.0+ (TF32 tensor cores), this device is {cc}"
        return None
    arch = (device.arch or "").split(":")[0]
    if kind == "rocm" and arch in TF32_AMD_ARCHES:
        return None
    return (f"Triton's AMD backend takes tf32 dot inputs only on {', '.join(TF32_AMD_ARCHES)} (CDNA3); "
            f"this device is {arch or 'of unknown arch'}")


def prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    return checked_in_the_interpreter(case, ctx, _prepare)


def checked_in_the_interpreter(case: MatmulCase, ctx: RunContext,
                               prepare_case: Callable[[MatmulCase, RunContext, bool], Prepared]) -> Prepared:
    """`prepare_case(case, ctx, on_cpu)` for the case, or on a CPU (Triton's interpreter) for the smaller case that
    checks the same kernel (interpreter_case), the row saying so. Shared by every matmul backend whose kernel runs
    in Triton's interpreter on a CPU (triton, triton_persistent, helion)."""
    on_cpu = ctx.platform.kind == "cpu"
    checked = interpreter_case(case) if on_cpu else case
    prepared = prepare_case(checked, ctx, on_cpu)
    if checked is not case:
        prepared.check_case = checked
        prepared.timing_note += (f"; checked at {checked.m}x{checked.n}x{checked.k} (the interpreter would take "
                                 f"hours at {case.m}x{case.n}x{case.k})")
    return prepared


# The interpreter runs each program of the kernel in numpy: about 10 ms per 64x64x64 tile step here, so 2048^3
# is minutes and 8192^3 hours. Above this many multiply-adds a smaller case checks the same kernel (edge
# tiles included: the sizes stay off the tile multiples) and the row says so.
INTERPRETER_LIMIT = 256**3


def interpreter_case(case: MatmulCase) -> MatmulCase:
    if case.m * case.n * case.k <= INTERPRETER_LIMIT:
        return case
    return replace(case, m=min(case.m, 200), n=min(case.n, 136), k=min(case.k, 152))


def _prepare(case: MatmulCase, ctx: RunContext, on_cpu: bool) -> Prepared:
    import torch

    from xmfu.kernels import matmul as kernel
    from xmfu.kernels.matmul_persistent import fp8_promotes
    ops = case.operands()  # fp8: spec.FP8_LAYOUT, B K-major as for every fp8 backend
    device, precision = ctx.torch_device, INPUT_PRECISION.get(case.dtype)
    out = torch.empty((case.m, case.n), device=device, dtype=torch_dtype(OUTPUT_DTYPE.get(case.dtype, case.dtype)))
    calls = []
    for _ in range(ctx.input_copies(case.input_bytes())):
        a, b = ops.used(*(to_torch(x, case.dtype, device, case.fp8_format) for x in (ops.a, ops.b)))
        calls.append(lambda a=a, b=b: kernel.matmul(a, b, out, precision))
    notes = {"library": "xmfu.kernels.matmul (Triton)", "input_precision": precision or "default",
             "interpreter": on_cpu, "input_copies": len(calls),
             "int64_offsets": kernel.needs_int64_offsets(a, b, out)}  # the variant for offsets past 2**31
    if case.dtype == "fp8":
        # as torch._scaled_mm without use_fast_accum: no whole-K reduced-precision accumulation (kernels/matmul.py)
        promoted = ("fp32 every min(128, BLOCK_K) products of K (max_num_imprecise_acc; CUTLASS's promotion without "
                    "fast accumulation), wgmma between" if fp8_promotes(a) else
                    "fp32 after every MMA (max_num_imprecise_acc=0)")
        notes.update(fp8_format=case.fp8_format, fp8_accumulation=promoted, fp8_layout=ops.fp8_layout)

    def result(rows: np.ndarray | None) -> np.ndarray:
        calls[0]()
        notes["autotune_config"] = kernel.best_config()
        return torch_rows(out, rows)

    return Prepared(rotate(calls), result, "host" if on_cpu else "torch", timing_valid=not on_cpu,
                    timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "", notes=notes)
