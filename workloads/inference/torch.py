"""Inference in eager torch: SDPA attention over the filled slots of a static, preallocated KV cache."""

from __future__ import annotations

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.inference.spec import InferenceSpec
from xmfu.workloads.inference.torch_generate import prepare_generation


def available(case: InferenceSpec, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind)
    return (False, why) if why else (True, "")


def prepare(case: InferenceSpec, ctx: RunContext) -> Prepared:
    notes = {"library": "torch eager, SDPA attention, static KV cache",
             "decode_attention": "the filled cache slots only (the cache sliced to the position)"}
    return prepare_generation(case, ctx, notes=notes)
