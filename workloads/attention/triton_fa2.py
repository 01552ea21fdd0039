"""xmfu's Triton FlashAttention at the published structure (kernels/flash_attention_fa2.py): the forward's key blocks
split into unmasked ones and the masked diagonal band (Triton tutorial 06's stages), EVEN_M/EVEN_N specialisations,
the delta preprocessing in Triton and a 5-GEMM backward with an atomic dQ (FlashAttention-2). It runs beside
`triton` (the tutorial-structure kernels/flash_attention.py, 7 GEMMs per backward block pair) so one GPU run
measures the old kernel against the new; every shape, one query token included, runs the tiled kernel here. The
checks, refusals and the interpreter's smaller case are the `triton` backend's (workloads/attention/triton.py)."""

from __future__ import annotations

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, triton_unavailable
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_modes import prepare_torch
from xmfu.workloads.attention.triton import available, interpreter_case

__all__ = ["available", "prepare"]

KERNEL = ("forward: unmasked key blocks, then the masked diagonal band; EVEN_M/EVEN_N specialised; backward: delta "
          "kernel, then dK/dV per key block with dQ added atomically (5 GEMMs per block pair)")


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    on_cpu = ctx.platform.kind == "cpu"
    import triton

    from xmfu.kernels.flash_attention_fa2 import flash_attention

    checked = interpreter_case(case) if on_cpu else case

    def attend(q, k, v):
        return flash_attention(q, k, v, checked.causal, checked.causal_offset, checked.scale)

    notes = {"library": "xmfu.kernels.flash_attention_fa2 (Triton)", "library_version": f"triton {triton.__version__}",
             "kernel": KERNEL, "interpreter": on_cpu}
    note = TRITON_INTERPRETER_NOTE if on_cpu else ""
    if checked is not case:
        note += (f"; checked at batch {checked.batch}, {checked.heads} heads, q {checked.seq_q}, k {checked.seq_kv} "
                 "(the interpreter would take hours at the full size)")
    prepared = prepare_torch(checked, ctx, attend, notes, timing_valid=not on_cpu, timing_note=note)
    if checked is not case:
        prepared.check_case = checked
    return prepared
