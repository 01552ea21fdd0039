"""xmfu's persistent Triton GEMM (kernels/matmul_persistent.py: Triton's tutorial 09 with AMD's XCD remap), beside
`triton` (the tutorial-03 kernel) so one run measures old against new. On a CPU it runs in Triton's interpreter for
correctness; the row records which kernel ran (tensor descriptors or pointers) and why."""

from __future__ import annotations

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, to_torch, torch_dtype, torch_rows
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.workloads.matmul import triton as tutorial
from xmfu.workloads.matmul.spec import MatmulCase

# The same dtypes, devices and interpreter limits as the tutorial kernel: both are tl.dot GEMMs under one compiler.
available = tutorial.available

# Active CUs per XCD (compute die): CDNA3 (gfx942) 38 (MI300X: 8 XCDs, 304 CUs; MI300A: 6 XCDs, 228 CUs; amdsmi's
# partitioning page: "An MI300X has 8 XCDs. An MI300A has 6 XCDs."), CDNA4 (gfx950) 32 (MI355X/MI350X: 8 XCDs, 256
# CUs, AMD CDNA 4 white paper). A compute partition (CPX) shows one XCD's CUs as a device: 1 XCD, no remap.
CUS_PER_XCD = {"gfx942": 38, "gfx950": 32}


def xcd_count(device: DeviceInfo) -> tuple[int, str]:
    """The device's compute dies (1 where unknown or not AMD) and how that was decided."""
    if device.kind != "rocm":
        return 1, "not an AMD multi-die part"
    arch = (device.arch or "").split(":")[0]
    per, cus = CUS_PER_XCD.get(arch), device.multiprocessors
    if per is None or not cus:
        return 1, f"XCD count unknown for {arch or 'this arch'}: no remap"
    if cus % per:
        return 1, f"{cus} CUs is not a whole number of {per}-CU XCDs on {arch}: no remap"
    return cus // per, f"{cus} CUs / {per} per XCD on {arch}"


def prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    from xmfu.harness.machine.frameworks import triton_unavailable

    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    return tutorial.checked_in_the_interpreter(case, ctx, _prepare)


def _prepare(case: MatmulCase, ctx: RunContext, on_cpu: bool) -> Prepared:
    import torch

    from xmfu.kernels import matmul_persistent as kernel
    ops = case.operands()  # fp8: spec.FP8_LAYOUT, B K-major as for every fp8 backend
    device, precision = ctx.torch_device, tutorial.INPUT_PRECISION.get(case.dtype)
    out_dtype = torch_dtype(tutorial.OUTPUT_DTYPE.get(case.dtype, case.dtype))
    out = torch.empty((case.m, case.n), device=device, dtype=out_dtype)
    xcds, xcd_why = xcd_count(ctx.device)
    calls, plans = [], []
    for _ in range(ctx.input_copies(case.input_bytes())):
        a, b = ops.used(*(to_torch(x, case.dtype, device, case.fp8_format) for x in (ops.a, ops.b)))
        plan = kernel.plan(a, b, out, num_xcds=xcds)
        plans.append(plan)
        calls.append(lambda a=a, b=b, plan=plan: kernel.matmul(a, b, out, precision, plan))
    plan = plans[0]  # every copy has the same shape, layout and alignment (fresh allocations)
    import triton

    notes = {"library": "xmfu.kernels.matmul_persistent (Triton)", "triton": triton.__version__,
             "input_precision": precision or "default",
             "interpreter": on_cpu, "input_copies": len(calls),
             "kernel": ("persistent, tensor descriptors (TMA)" if plan.kernel == "tma" else "persistent, pointers"),
             "kernel_choice": plan.why, "programs": plan.num_sms,
             "xcd_remap": (f"{plan.num_xcds} XCDs ({xcd_why})" if plan.num_xcds > 1 else f"off ({xcd_why})"),
             "tile_loop": "flattened into the K loop" if plan.flatten else "a plain loop", "int64_offsets": plan.int64}
    if case.dtype == "fp8":  # kernels/matmul_persistent.py FP8_PROMOTION: why not after every MMA on Hopper
        promoted = ("fp32 every min(128, BLOCK_K) products of K (max_num_imprecise_acc; CUTLASS's promotion without "
                    "fast accumulation), wgmma between" if kernel.fp8_promotes(a) else
                    "fp32 after every MMA (max_num_imprecise_acc=0)")
        notes.update(fp8_format=case.fp8_format, fp8_accumulation=promoted, fp8_layout=ops.fp8_layout)

    def result(rows: np.ndarray | None) -> np.ndarray:
        calls[0]()
        notes["autotune_config"] = kernel.best_config(plan.kernel)
        return torch_rows(out, rows)

    return Prepared(rotate(calls), result, "host" if on_cpu else "torch", timing_valid=not on_cpu,
                    timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "", notes=notes)
