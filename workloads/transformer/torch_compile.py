"""The transformer step with the model under torch.compile (Inductor); compile time is reported apart. Across
processes (DDP, FSDP) each block is compiled before wrapping, as torchtitan does."""

from __future__ import annotations

import shutil

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.transformer import torch_parallel
from xmfu.workloads.transformer.spec import TrainSpec
from xmfu.workloads.transformer.torch_train import prepare_train


def available(case: TrainSpec, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind) or torch_parallel.unavailable(case, ctx.platform.kind)
    if why:
        return False, why
    if ctx.platform.kind == "cpu" and not (shutil.which("cc") or shutil.which("gcc") or shutil.which("g++")):
        return False, "torch.compile on a CPU needs a C++ compiler (Inductor generates C++); none is on PATH"
    return True, ""


def prepare(case: TrainSpec, ctx: RunContext) -> Prepared:
    if case.distributed:
        return torch_parallel.prepare_parallel(case, ctx, compile_model=True, notes={
            "library": "torch.compile (Inductor) per block, SDPA attention", "compile_dynamic": False})
    return prepare_train(case, ctx, compile_model=True, notes={"library": "torch.compile (Inductor), SDPA attention"})
