"""The transformer step in eager torch, attention through SDPA."""

from __future__ import annotations

from harness.engine.case import Prepared
from harness.engine.context import RunContext
from harness.machine.frameworks import torch_unavailable
from workloads.transformer.spec import TrainSpec
from workloads.transformer.torch_train import prepare_train


def available(case: TrainSpec, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind)
    return (False, why) if why else (True, "")


def prepare(case: TrainSpec, ctx: RunContext) -> Prepared:
    return prepare_train(case, ctx, notes={"library": "torch eager, SDPA attention"})
