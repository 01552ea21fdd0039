"""The transformer step in eager torch, attention through SDPA: on one device, or across processes with DDP or
FSDP (`workload.parallel`)."""

from __future__ import annotations

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.transformer import torch_fp8, torch_parallel
from xmfu.workloads.transformer.spec import TrainSpec
from xmfu.workloads.transformer.torch_train import prepare_train

LIBRARY = "torch eager, SDPA attention"


def available(case: TrainSpec, ctx: RunContext) -> tuple[bool, str]:
    why = (torch_unavailable(case.dtype, ctx.platform.kind) or torch_parallel.unavailable(case, ctx.platform.kind)
           or torch_fp8.unavailable(case))
    return (False, why) if why else (True, "")


def prepare(case: TrainSpec, ctx: RunContext) -> Prepared:
    if case.parallel == "ep":
        from xmfu.workloads.transformer.torch_ep_step import prepare_ep

        return prepare_ep(case, ctx, notes={"library": LIBRARY + ", experts split over the ranks"})
    if case.distributed:
        return torch_parallel.prepare_parallel(case, ctx, notes={"library": LIBRARY})
    if case.fp8 != "none":
        return torch_fp8.prepare_fp8(case, ctx, compile_model=False,
                                     notes={"library": LIBRARY + ", torchao fp8 linears"})
    return prepare_train(case, ctx, notes={"library": LIBRARY})
