"""The transformer step with the model under torch.compile (Inductor); compile time is reported apart. Across
processes (DDP, FSDP) each block is compiled before wrapping, as torchtitan does."""

from __future__ import annotations

import shutil

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.transformer import torch_fp8, torch_parallel
from xmfu.workloads.transformer.spec import TrainSpec
from xmfu.workloads.transformer.torch_train import prepare_train


def available(case: TrainSpec, ctx: RunContext) -> tuple[bool, str]:
    why = (torch_unavailable(case.dtype, ctx.platform.kind) or torch_parallel.unavailable(case, ctx.platform.kind)
           or torch_fp8.unavailable(case))
    if why:
        return False, why
    if ctx.platform.kind == "cpu" and not (shutil.which("cc") or shutil.which("gcc") or shutil.which("g++")):
        return False, "torch.compile on a CPU needs a C++ compiler (Inductor generates C++); none is on PATH"
    if case.parallel == "ep":
        return False, "ep runs on the torch backend (eager) only"
    return (False, why) if (why := _moe_loop(case, ctx)) else (True, "")


def _moe_loop(case: TrainSpec, ctx: RunContext) -> str | None:
    """A mixture of experts whose experts would run as the per-expert loop: its split sizes are Python ints, so
    Dynamo recompiles for every new routing and, past its recompile limit, runs the step eagerly under this
    backend's name (seen here before torch._grouped_mm was found for bf16 on a CPU); or a grouped GEMM Dynamo cannot
    trace in this dtype."""
    if not case.model.moe:
        return None
    import torch

    from xmfu.workloads.transformer.torch_moe import GROUPED, compile_problem, expert_gemm

    dtype = torch.bfloat16 if case.dtype == "bf16" else torch.float32
    path, why = expert_gemm(case.model, torch.device(ctx.torch_device).type, dtype)
    if path != GROUPED:
        return f"torch.compile over the per-expert loop recompiles for every routing: {why}"
    return compile_problem(dtype)


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
    if case.fp8 != "none":
        return torch_fp8.prepare_fp8(case, ctx, compile_model=True, notes={
            "library": "torch.compile (Inductor), SDPA attention, torchao fp8 linears"})
    return prepare_train(case, ctx, compile_model=True, notes={"library": "torch.compile (Inductor), SDPA attention"})
