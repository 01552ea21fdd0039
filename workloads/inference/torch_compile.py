"""Inference through torch.compile (Inductor) against the static KV cache: a prefill row compiles the prefill for
its shape, a decode row the decode step with mode="reduce-overhead" (CUDA graphs on GPUs). Only the timed function
is compiled; the correctness pass runs the other phase eagerly."""

from __future__ import annotations

import shutil

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.inference.spec import InferenceSpec
from xmfu.workloads.inference.torch_generate import prepare_generation


def available(case: InferenceSpec, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind)
    if why:
        return False, why
    if ctx.platform.kind == "cpu" and not (shutil.which("cc") or shutil.which("gcc") or shutil.which("g++")):
        return False, "torch.compile on a CPU needs a C++ compiler (Inductor generates C++); none is on PATH"
    return True, ""


def prepare(case: InferenceSpec, ctx: RunContext) -> Prepared:
    import torch._dynamo

    # Each case is a new shape: without a reset, a sweep's graphs would pile up on the same code objects until
    # Dynamo's recompile limit (8) silently sent the rest to eager. The previous cases' models are released.
    torch._dynamo.reset()
    notes = {"library": "torch.compile (Inductor), SDPA attention, static KV cache",
             "compile_modes": {"prefill": "default, dynamic=False", "decode_step": "reduce-overhead, dynamic=False"},
             "decode_attention": "every cache slot, the unfilled ones masked (static shapes: no recompile per "
                                 "position, one CUDA graph for every step)"}
    return prepare_generation(case, ctx, notes=notes, compiled=True)
