"""xmfu's persistent Triton grouped GEMM (kernels/grouped_matmul.py): one launch for all groups, the group sizes
read on the device; on a CPU it runs in Triton's interpreter, checked and not timed."""

from __future__ import annotations

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, to_torch, torch_rows, triton_unavailable
from xmfu.workloads.grouped_matmul.spec import GroupedMatmulCase

INTERPRETER_FLOPS = 2e8  # Triton's interpreter runs each tile in numpy: the smoke shapes take seconds, these minutes


def available(case: GroupedMatmulCase, ctx: RunContext) -> tuple[bool, str]:
    why = triton_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if ctx.platform.kind == "cpu" and case.flops() > INTERPRETER_FLOPS:
        return False, (f"Triton's interpreter on a CPU checks grouped matmuls up to {INTERPRETER_FLOPS:.0e} FLOPs "
                       f"(it is not timed there); this case has {case.flops():.3g}")
    return True, ""


def prepare(case: GroupedMatmulCase, ctx: RunContext) -> Prepared:
    import torch

    from xmfu.kernels import grouped_matmul as kernel

    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    on_cpu = ctx.platform.kind == "cpu"
    host = case.inputs()
    a, b = (to_torch(host[n], case.dtype, ctx.torch_device) for n in ("a", "b"))
    offsets = torch.from_numpy(case.offsets()).to(ctx.torch_device)
    out = torch.empty(case.m, case.n, dtype=a.dtype, device=a.device)
    precision = "ieee" if case.dtype == "fp32" else None  # fp32 means fp32 (tl.dot's default on NVIDIA is tf32)

    def call():
        return kernel.grouped_matmul(a, b, offsets, out, precision)

    def result(rows: np.ndarray | None) -> np.ndarray:
        return torch_rows(call(), rows)

    tiles = kernel.CONFIGS["interpreter" if kernel.interpreting() else "gpu"]
    notes = {"library": "xmfu.kernels.grouped_matmul (Triton, persistent)", "interpreter": on_cpu,
             "programs": kernel.programs(a.device), "block_m_n_k": list(tiles[:3]), "input_precision": precision}
    return Prepared(call, result, "host" if on_cpu else "torch", timing_valid=not on_cpu,
                    timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "", notes=notes, output=torch_rows)
