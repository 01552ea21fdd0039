"""xmfu's Triton FlashAttention (kernels/flash_attention.py); a forward with one query token (a decode step's shape)
runs the split-KV decode kernel (kernels/flash_decoding.py) instead. On a CPU both run in Triton's interpreter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, triton_unavailable
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_modes import prepare_torch

HEAD_DIMS = (16, 32, 64, 80, 96, 128, 256)  # xmfu.kernels.flash_attention.HEAD_DIMS, without importing triton
GRID_YZ_MAX = 65535  # xmfu.kernels.flash_attention_common.GRID_YZ_MAX: the heads and the batch each on a grid axis
KERNEL = ("forward: unmasked key blocks, then the masked diagonal band; backward: delta kernel, then dK/dV per key "
          "block and dQ per query block, deterministic (no atomics)")
# kernels/flash_attention.py: the dQ kernel recomputes Q Kᵀ and dO Vᵀ, which the dK/dV kernel also computes; the row's
# FLOPs count the backward as 2.5 forwards (workloads/attention/spec.py flops), FlashAttention-2's 5 GEMMs.
BACKWARD_GEMMS = "7 per (key block, query block) pair, of which the FLOP count credits 5 (2.5x the forward's 2)"
DECODE_KERNEL = "split-KV: the GQA group's query heads in one tile, context ranges combined by a second kernel"


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    why = triton_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if case.head_dim not in HEAD_DIMS:
        return False, f"head_dim {case.head_dim} is not supported by the Triton kernel; allowed: {HEAD_DIMS}"
    for name, n in (("batch", case.batch), ("heads", case.heads)):
        if n > GRID_YZ_MAX:  # on a CPU the interpreter's smaller case would pass; a GPU launch would not
            return False, (f"{name} {n} is more than the {GRID_YZ_MAX} programs a GPU grid axis past the first takes "
                           "(the Triton kernels launch one program per head on axis 1 and per batch on axis 2)")
    if case.dtype == "tf32":
        return False, "tf32 is not offered by xmfu's Triton attention (fp32 runs with ieee precision)"
    return True, ""


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    return prepare_interpreted(case, ctx, _attend)


def _attend(checked: AttentionCase) -> tuple[Callable, dict[str, Any]]:
    from xmfu.kernels.flash_attention import flash_attention
    from xmfu.kernels.flash_decoding import flash_decode

    decode = checked.seq_q == 1 and checked.mode == "fwd"
    # the one query sees keys 0..causal_offset under a causal mask: the entries the `exact` FLOP count keeps
    kv_len = min(checked.seq_kv, checked.causal_offset + 1) if checked.causal else checked.seq_kv

    def attend(q, k, v):
        if decode:
            return flash_decode(q, k, v, kv_len, checked.scale)
        return flash_attention(q, k, v, checked.causal, checked.causal_offset, checked.scale)

    if decode:
        return attend, {"library": "xmfu.kernels.flash_decoding (Triton, split-KV)", "kernel": DECODE_KERNEL}
    return attend, {"library": "xmfu.kernels.flash_attention (Triton)", "kernel": KERNEL,
                    "backward_gemms": BACKWARD_GEMMS}


def prepare_interpreted(case: AttentionCase, ctx: RunContext,
                        build: Callable[[AttentionCase], tuple[Callable, dict[str, Any]]]) -> Prepared:
    """A Triton attention backend's Prepared: on a CPU the interpreter checks `interpreter_case` (timing not
    valid); `build(checked)` gives the attend function and its notes, and imports the kernel only now, after the
    interpreter was chosen."""
    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    on_cpu = ctx.platform.kind == "cpu"
    checked = interpreter_case(case) if on_cpu else case
    attend, notes = build(checked)
    note = (TRITON_INTERPRETER_NOTE if on_cpu else "") + checked_note(case, checked, "hours")
    prepared = prepare_torch(checked, ctx, attend, {**notes, "interpreter": on_cpu}, timing_valid=not on_cpu,
                             timing_note=note)
    if checked is not case:
        prepared.check_case = checked
    return prepared


def checked_note(case: AttentionCase, checked: AttentionCase, took: str) -> str:
    """What a row timed at `case` but checked at the interpreter's smaller `checked` says, or nothing."""
    if checked is case:
        return ""
    return (f"; checked at batch {checked.batch}, {checked.heads} heads, q {checked.seq_q}, k {checked.seq_kv} "
            f"(the interpreter would take {took} at the full size)")


# The interpreter runs every (query block, key block) program in numpy; above this many score entries a
# smaller case checks the same kernel: one kv-head group (GQA kept), lengths off the tile multiples, the
# same causal alignment, head dim and mode.
INTERPRETER_LIMIT = 2 * 4 * 128 * 128


def interpreter_case(case: AttentionCase) -> AttentionCase:
    if case.batch * case.heads * case.seq_q * case.seq_kv <= INTERPRETER_LIMIT:
        return case
    seq_kv = min(case.seq_kv, 97)
    seq_q = min(case.seq_q, seq_kv if case.causal and case.alignment == "bottom_right" else 83)
    return replace(case, batch=1, heads=case.group, kv_heads=1, seq_q=seq_q, seq_kv=seq_kv)
