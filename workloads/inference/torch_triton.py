"""Inference on xmfu's Triton kernels: the prompt through FlashAttention with causal offset 0 over the static KV cache;
each decode step (one query token at position p) through the split-KV decode kernel (kernels/flash_decoding.py)
over slots 0..p, the query heads of a GQA group packed into one tile and the context split across programs; the
Triton GEMM for every linear layer, as in the training step's torch_triton backend. On a CPU all run in Triton's
interpreter."""

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
    from xmfu.kernels.flash_decoding import flash_decode
    from xmfu.workloads.transformer.triton_linear import use_triton_linears

    def attend_prefix(q, k_cache, v_cache, start: int):
        # query i (position start + i) sees slot j when j <= i + start: the prompt causally from 0; one decode token
        # at `start` sees slots 0..start, exactly the keys the decode step's FLOPs and bytes count.
        if q.shape[2] == 1:
            return flash_decode(q, k_cache, v_cache, kv_len=start + 1)
        return flash_attention(q, k_cache, v_cache, causal=True, causal_offset=start)

    def customize(model) -> dict:
        return {"triton_linears": use_triton_linears(model)}

    notes = {"library": "torch eager, Triton FlashAttention (prefill) and split-KV decode (decode steps) + Triton "
                        "GEMM linears, static KV cache",
             "interpreter": on_cpu,
             "decode_attention": "xmfu.kernels.flash_decoding: slots 0..p read once per kv head, the GQA group's "
                                 "query heads packed into one tile, the context split into ranges (FlashAttention-2's "
                                 "split heuristic on a GPU, 4 in the interpreter) whose partial outputs a second "
                                 "kernel combines"}
    return prepare_generation(case, ctx, notes=notes, attend_prefix=attend_prefix, customize=customize,
                              timing_valid=not on_cpu, timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "")
