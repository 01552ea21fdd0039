"""The transformer step on xmfu's Triton kernels: FlashAttention for attention, the Triton GEMM for every
linear layer (forward and backward). On a CPU both run in Triton's interpreter."""

from __future__ import annotations

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, triton_unavailable
from xmfu.workloads.attention.triton import HEAD_DIMS
from xmfu.workloads.transformer import torch_parallel
from xmfu.workloads.transformer.spec import TrainSpec
from xmfu.workloads.transformer.torch_train import prepare_train


def available(case: TrainSpec, ctx: RunContext) -> tuple[bool, str]:
    why = triton_unavailable(ctx.platform.kind) or torch_parallel.unavailable(case, ctx.platform.kind)
    if why:
        return False, why
    if case.fp8 != "none":
        return False, ("its Triton GEMM linears replace the linear layers fp8 training converts; the torch, "
                       "torch_compile and jax backends run fp8")
    if case.model.moe:
        return False, ("a mixture of experts' routed experts are stacked weights, not linear layers: this backend's "
                       "Triton GEMM would run only its attention and dense layers, so its row would not be the Triton "
                       "step; the torch and jax backends run it")
    if case.model.head_dim not in HEAD_DIMS:
        return False, f"head dim {case.model.head_dim} is not supported by the Triton kernel; allowed: {HEAD_DIMS}"
    params = case.model.param_counts()["total"]
    if ctx.platform.kind == "cpu" and params > INTERPRETER_PARAMS:
        return False, (f"the Triton interpreter would take hours for a {params / 1e6:.0f}M-parameter step on a CPU; "
                       "model=tiny checks these kernels here, a GPU times them")
    return True, ""


# Interpreted, every GEMM tile step is numpy work: the tiny preset's step takes about 10 s here; a 125M model's
# would take hours (its vocabulary-sized output layer alone thousands of times the tiny one's).
INTERPRETER_PARAMS = 2_000_000


def prepare(case: TrainSpec, ctx: RunContext) -> Prepared:
    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    on_cpu = ctx.platform.kind == "cpu"
    from xmfu.kernels.flash_attention import flash_attention
    from xmfu.workloads.transformer.triton_linear import use_triton_linears

    def attend(q, k, v):
        return flash_attention(q, k, v, causal=True)

    def customize(model) -> dict:
        return {"triton_linears": use_triton_linears(model)}

    notes = {"library": "torch eager, Triton FlashAttention + Triton GEMM linears", "interpreter": on_cpu}
    prepare = torch_parallel.prepare_parallel if case.distributed else prepare_train
    return prepare(case, ctx, attend=attend, customize=customize, notes=notes, timing_valid=not on_cpu,
                   timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "")
