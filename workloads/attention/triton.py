"""xmfu's Triton FlashAttention (kernels/flash_attention.py); on a CPU it runs in Triton's interpreter."""

from __future__ import annotations

from harness.engine.case import Prepared, Unavailable
from harness.engine.context import RunContext
from harness.machine.frameworks import TRITON_INTERPRETER_NOTE, triton_unavailable
from workloads.attention.spec import AttentionCase
from workloads.attention.torch_modes import prepare_torch

HEAD_DIMS = (16, 32, 64, 128)  # kernels.flash_attention.HEAD_DIMS, without importing triton here


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    why = triton_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if case.head_dim not in HEAD_DIMS:
        return False, f"head_dim {case.head_dim} is not supported by the Triton kernel; allowed: {HEAD_DIMS}"
    if case.dtype == "tf32":
        return False, "tf32 is not offered by xmfu's Triton attention (fp32 runs with ieee precision)"
    return True, ""


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    on_cpu = ctx.platform.kind == "cpu"
    from kernels.flash_attention import flash_attention

    def attend(q, k, v):
        return flash_attention(q, k, v, case.causal, case.causal_offset, case.scale)

    notes = {"library": "kernels.flash_attention (Triton)", "interpreter": on_cpu}
    return prepare_torch(case, ctx, attend, notes, timing_valid=not on_cpu,
                         timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "")
