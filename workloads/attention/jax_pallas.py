"""The Pallas attention of jax.experimental.pallas.ops, under jit: `mha` (ops/gpu/attention.py, Triton lowering) on
NVIDIA and AMD GPUs and, with interpret=True, on a CPU (checked, timing not valid); `flash_attention`
(ops/tpu/flash_attention.py, Mosaic) on TPUs. The row's notes name the op that ran, its block sizes and lowering.

What the ops can express (jax 0.10.2, read in the installed sources):
- causal: top-left only. gpu `mha` keeps `span_q[:, None] >= span_k[None, :]`; tpu `flash_attention` keeps
  `col_ids <= row_ids`. A bottom-right case runs where seq_q == seq_kv (the two diagonals are one), and is skipped
  otherwise. gpu `mha`'s causal K loop ends at ceil(block_q·(i+1)/block_k), past the keys when seq_q > seq_kv: skipped.
- GQA: both ops take equal head counts (tpu: "Head count mismatch"; gpu: K/V BlockSpecs index the query's head), so
  K/V heads are repeated to the query heads inside the jitted program (jnp.repeat; its cost is timed and the row
  says so; autodiff sums dK/dV back over each group).
- sequence lengths: gpu `mha` raises unless seq_q and seq_kv are multiples of block_q and block_k, and its fused
  backward unless seq_q // block_q_dq == seq_kv // block_kv_dkv; Triton needs power-of-two blocks (>= 16 for tl.dot).
  tpu `flash_attention` needs kv_seq_len divisible by block_k_major and block_k (_verify_block).
- backward: both ops are jax.custom_vjp with Pallas backward kernels (gpu: backward_pass_impl="triton", a
  preprocess kernel for delta and one fused dK/dV + dQ kernel; tpu: _flash_attention_bwd_dkv and _dq), reached
  through jax.vjp as in the `jax` backend (workloads/attention/jax.py), whose timing structure this reuses.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import local_jax_device, to_jax
from xmfu.workloads.attention.jax import _program, from_jax_layout, to_jax_layout
from xmfu.workloads.attention.spec import GRADS, AttentionCase
from xmfu.workloads.attention.triton import checked_note, interpreter_case
from xmfu.workloads.matmul.jax_pallas import PALLAS_INTERPRETER_NOTE, jaxlib_version, lowering, pallas_unavailable

# Block caps: jax's defaults (gpu BlockSizes.get_default: 128 forward, 32 backward; tpu: 128 everywhere); the
# interpreter takes any divisor, the larger the fewer (slow) grid steps.
CAPS = {"triton": (128, 32), "interpret": (128, 128)}
TRITON_MIN_BLOCK = 16  # tl.dot's smallest tile


def _fits(block: int, how: str) -> bool:
    return how == "interpret" or (block >= TRITON_MIN_BLOCK and block & (block - 1) == 0)


def _block(n: int, cap: int, how: str) -> int | None:
    """The largest block <= cap that divides n (a power of two >= 16 under Triton), or None."""
    return next((b for b in range(min(cap, n), 0, -1) if n % b == 0 and _fits(b, how)), None)


def mha_blocks(seq_q: int, seq_kv: int, how: str, backward: bool) -> dict[str, int] | str:
    """gpu `mha`'s BlockSizes fields for these lengths under `how` (triton | interpret), or why there are none."""
    fwd_cap, bwd_cap = CAPS[how]
    out = {"block_q": _block(seq_q, fwd_cap, how), "block_k": _block(seq_kv, fwd_cap, how)}
    if backward:
        out["block_q_dkv"], out["block_kv_dq"] = _block(seq_q, bwd_cap, how), _block(seq_kv, bwd_cap, how)
        # the fused backward runs one program per K/V block that also owns one Q block: equal block counts
        g = math.gcd(seq_q, seq_kv)
        counts = [c for c in range(1, g + 1) if g % c == 0 and _fits(seq_q // c, how) and _fits(seq_kv // c, how)
                  and seq_q // c <= bwd_cap and seq_kv // c <= bwd_cap]
        if counts:
            out["block_q_dq"], out["block_kv_dkv"] = seq_q // counts[0], seq_kv // counts[0]
    missing = [name for name in ("block_q", "block_k", "block_q_dkv", "block_kv_dq", "block_q_dq", "block_kv_dkv")
               if name in out and out[name] is None] + ([] if not backward or "block_q_dq" in out else ["block_q_dq"])
    if missing:
        rule = "power-of-two blocks >= 16 under Triton" if how == "triton" else "blocks that divide the lengths"
        return (f"jax's Pallas mha cannot tile seq_q={seq_q}, seq_kv={seq_kv} ({', '.join(missing)}): it needs "
                f"{rule}{' and, backward, as many Q blocks as K/V blocks' if backward else ''}")
    return out


def tpu_blocks(seq_q: int, seq_kv: int) -> dict[str, int] | str:
    """tpu `flash_attention`'s BlockSizes: its defaults (128) capped by the lengths; K/V must divide."""
    bq, bk = min(128, seq_q), min(128, seq_kv)
    if seq_kv % bk:
        return f"jax's Pallas TPU flash_attention needs seq_kv divisible by block_k={bk}; seq_kv is {seq_kv}"
    return {"block_q": bq, "block_k_major": bk, "block_k": bk, "block_b": 1, "block_q_major_dkv": bq,
            "block_k_major_dkv": bk, "block_k_dkv": bk, "block_q_dkv": bq, "block_k_major_dq": bk,
            "block_k_dq": bk, "block_q_dq": bq}


@lru_cache(maxsize=1)
def gpu_mha_too_old() -> str | None:
    """Why this jax's Pallas GPU mha cannot take xmfu's blocks, or None. jax 0.4.38's takes block_q and block_k
    arguments, one pair for the forward and the backward (its signature: mha(q, k, v, segment_ids, sm_scale, causal,
    block_q=128, block_k=128, backward_pass_impl, ...)); the BlockSizes record xmfu passes, with the backward's
    blocks apart, came later."""
    import jax
    from jax.experimental.pallas.ops.gpu import attention as gpu

    if hasattr(gpu, "BlockSizes"):
        return None
    return (f"jax {jax.__version__}'s Pallas GPU attention (jax.experimental.pallas.ops.gpu.attention.mha) has no "
            "BlockSizes (it takes one block_q/block_k pair for the forward and the backward); xmfu passes "
            "BlockSizes: a newer jax has it")


def case_unavailable(case: AttentionCase, kind: str) -> str | None:
    """Why the Pallas op cannot run this case on a `kind` device, or None."""
    if case.dtype == "tf32":
        return "tf32 attention is not offered through jax's Pallas attention"
    if case.dtype == "fp16" and kind == "tpu":
        return "TPUs have no fp16 matrix unit; use bf16"
    if case.causal and case.causal_offset != 0:
        return ("jax's Pallas attention ops keep the top-left causal diagonal only (gpu mha: span_q >= span_k; tpu "
                "flash_attention: col_ids <= row_ids); a bottom-right case with seq_q != seq_kv cannot be expressed")
    how = lowering(kind)
    if how == "mosaic":
        blocks = tpu_blocks(case.seq_q, case.seq_kv)
        return blocks if isinstance(blocks, str) else None
    if case.causal and case.seq_q > case.seq_kv:
        return ("jax's Pallas mha runs its causal K loop to ceil(block_q*(i+1)/block_k) blocks, past the keys when "
                f"seq_q ({case.seq_q}) > seq_kv ({case.seq_kv})")
    old = gpu_mha_too_old()
    if old:
        return old
    blocks = mha_blocks(case.seq_q, case.seq_kv, how, case.mode != "fwd")
    return blocks if isinstance(blocks, str) else None


# Pallas' interpreter compiles every grid step into the XLA program: above the Triton interpreter's limit a smaller
# case checks the same op, the Triton backend's (workloads/attention/triton.py interpreter_case: one kv-head group,
# GQA kept, lengths off the block multiples, the same causal alignment, head dim and mode).


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    why = pallas_unavailable(ctx.platform.kind) or case_unavailable(case, ctx.platform.kind)
    return (False, why) if why else (True, "")


def _attend(case: AttentionCase, how: str) -> tuple[Any, dict[str, Any]]:
    """The op as a function of (q, k, v) in its own layout, and what the row says about it."""
    import jax.numpy as jnp

    if how == "mosaic":
        from jax.experimental.pallas.ops.tpu import flash_attention as tpu

        blocks, head_axis = tpu_blocks(case.seq_q, case.seq_kv), 1  # (B, H, S, D)
        sizes = tpu.BlockSizes(**blocks)
        op = lambda q, k, v: tpu.flash_attention(q, k, v, causal=case.causal, sm_scale=case.scale,  # noqa: E731
                                                 block_sizes=sizes)
        library = "jax.experimental.pallas.ops.tpu.flash_attention.flash_attention (Mosaic)"
    else:
        from jax.experimental.pallas.ops.gpu import attention as gpu

        blocks, head_axis = mha_blocks(case.seq_q, case.seq_kv, how, case.mode != "fwd"), 2  # (B, S, H, D)
        full = {"block_q_dkv": None, "block_kv_dkv": None, "block_q_dq": None, "block_kv_dq": None, **blocks}
        sizes = gpu.BlockSizes(**full)
        op = lambda q, k, v: gpu.mha(q, k, v, None, sm_scale=case.scale, causal=case.causal,  # noqa: E731
                                     block_sizes=sizes, interpret=how == "interpret")
        library = f"jax.experimental.pallas.ops.gpu.attention.mha ({how})"

    def attend(q, k, v):
        if case.group > 1:
            k, v = (jnp.repeat(x, case.group, axis=head_axis) for x in (k, v))
        return op(q, k, v)

    notes = {"library": library, "lowering": how, "block_sizes": blocks,
             "layout": "B,H,S,D" if head_axis == 1 else "B,S,H,D (converted at set-up)",
             "backward": "the op's jax.custom_vjp (Pallas backward kernels)" if case.mode != "fwd" else "not run",
             "gqa": (f"K/V heads repeated x{case.group} before the op (jnp.repeat, timed): the op takes equal head "
                     "counts") if case.group > 1 else "none (MHA)"}
    return attend, notes


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    kind = ctx.platform.kind
    why = pallas_unavailable(kind) or case_unavailable(case, kind)
    if why:
        raise Unavailable(why)
    checked = interpreter_case(case) if lowering(kind) == "interpret" else case
    prepared = _prepare(checked, ctx, lowering(kind))
    if checked is not case:
        prepared.check_case = checked
        prepared.timing_note += checked_note(case, checked, "minutes")
    return prepared


def _prepare(case: AttentionCase, ctx: RunContext, how: str) -> Prepared:
    import jax

    device = local_jax_device(ctx.config.device_index)
    convert = (lambda a: a) if how == "mosaic" else to_jax_layout
    back = (lambda a: a) if how == "mosaic" else from_jax_layout
    x = {n: to_jax(convert(a), case.dtype, device) for n, a in case.inputs().items()}
    attend, notes = _attend(case, how)
    timed, results, program_notes = _program(case, attend, x)

    def result(select: dict | None) -> dict[str, np.ndarray]:
        names = ["out"] if case.mode == "fwd" else ["out", *GRADS]
        picked = {}
        for name, value in zip(names, results(), strict=False):
            host = back(np.asarray(value).astype(np.float64))
            index = (select or {}).get(name)
            picked[name] = host if index is None else host[index[0], index[1]]
        return picked

    notes.update(program_notes, jax=jax.__version__, jaxlib=jaxlib_version(), jax_device_kind=device.device_kind)
    on_cpu = how == "interpret"
    return Prepared(timed, result, "jax", timing_valid=not on_cpu,
                    timing_note=PALLAS_INTERPRETER_NOTE if on_cpu else "", notes=notes)
