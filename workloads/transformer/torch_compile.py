"""The transformer step with the model under torch.compile (Inductor); compile time is reported apart."""

from __future__ import annotations

import shutil

from harness.case import Prepared
from harness.context import RunContext
from harness.frameworks import torch_unavailable
from workloads.transformer.spec import TrainCase
from workloads.transformer.torch_train import prepare_train


def available(case: TrainCase, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind)
    if why:
        return False, why
    if ctx.platform.kind == "cpu" and not (shutil.which("cc") or shutil.which("gcc") or shutil.which("g++")):
        return False, "torch.compile on a CPU needs a C++ compiler (Inductor generates C++); none is on PATH"
    return True, ""


def prepare(case: TrainCase, ctx: RunContext) -> Prepared:
    return prepare_train(case, ctx, compile_model=True, notes={"library": "torch.compile (Inductor), SDPA attention"})
