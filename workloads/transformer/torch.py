"""The transformer step in eager torch, attention through SDPA."""

from __future__ import annotations

from harness.case import Prepared
from harness.context import RunContext
from harness.frameworks import torch_unavailable
from workloads.transformer.spec import TrainCase
from workloads.transformer.torch_train import prepare_train


def available(case: TrainCase, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind)
    return (False, why) if why else (True, "")


def prepare(case: TrainCase, ctx: RunContext) -> Prepared:
    return prepare_train(case, ctx, notes={"library": "torch eager, SDPA attention"})
