"""Inference on xmfu's Triton kernels: FlashAttention with a causal offset over the static KV cache (prefill: offset
0; decode at position p: one query row with offset p, so it sees slots 0..p and stops at its query tile's causal
bound instead of the cache's end) and the Triton GEMM for every linear layer, as in the training step's
torch_triton backend. On a CPU both run in Triton's interpreter."""

from __future__ import annotations

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, triton_unavailable
from xmfu.workloads.attention.triton import HEAD_DIMS
from xmfu.workloads.inference.spec import InferenceSpec
from xmfu.workloads.inference.torch_generate import prepare_generation


def available(case: InferenceSpec, ctx: RunContext) -> tuple[bool, str]:
    why = triton_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if case.model.head_dim not in HEAD_DIMS:
        return False, f"head dim {case.model.head_dim} is not supported by the Triton kernel; allowed: {HEAD_DIMS}"
    return True, ""


def prepare(case: InferenceSpec, ctx: RunContext) -> Prepared:
    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    on_cpu = ctx.platform.kind == "cpu"
    from xmfu.kernels.flash_attention import flash_attention
    from xmfu.workloads.transformer.triton_linear import use_triton_linears

    def attend_prefix(q, k_cache, v_cache, start: int):
        # query i (position start + i) sees slot j when j <= i + start: the prompt causally from 0, or one decode
        # token at `start` seeing every filled slot; the kernel stops at the last visible key block.
        return flash_attention(q, k_cache, v_cache, causal=True, causal_offset=start)

    def customize(model) -> dict:
        return {"triton_linears": use_triton_linears(model)}

    notes = {"library": "torch eager, Triton FlashAttention (causal offset) + Triton GEMM linears, static KV cache",
             "interpreter": on_cpu,
             "decode_attention": "slots 0..p visible (causal offset p); the kernel's query tile holds BLOCK_M rows, "
                                 "of which a decode step fills one, and it loads keys up to its tile's causal bound "
                                 "(slot p + BLOCK_M - 1), masking those after p"}
    return prepare_generation(case, ctx, notes=notes, attend_prefix=attend_prefix, customize=customize,
                              timing_valid=not on_cpu, timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "")
