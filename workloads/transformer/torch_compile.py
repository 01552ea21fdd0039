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
    import torch._dynamo

    # Every case builds a new model, but Dynamo keeps its graphs on the code objects the models share
    # (Transformer.forward, Block.forward), each new shape one more entry. Past torch._dynamo.config.recompile_limit
    # (8; cache_size_limit before torch 2.7) Dynamo runs the frame eagerly with only a log warning, so a batch sweep's
    # later rows would time eager code under this backend's name (seen here on the tiny preset: the 8th batch size
    # compiled no graph). A reset per case, as the inference backend does; the previous cases' models are released.
    torch._dynamo.reset()
    if case.distributed:
        return torch_parallel.prepare_parallel(case, ctx, compile_model=True, notes={
            "library": "torch.compile (Inductor) per block, SDPA attention", "compile_dynamic": False})
    return prepare_train(case, ctx, compile_model=True, notes={"library": "torch.compile (Inductor), SDPA attention"})
