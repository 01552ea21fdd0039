"""What a distributed torch step communicates, and those collectives timed alone with the collectives
workload's machinery (workloads/collectives/torch_dist.py: the same process group, buffers and calls) at the
sizes the step moves: DDP's gradient buckets as its reducer built them, FSDP2's per-group all-gathers and
reduce-scatters (workloads/transformer/parallel.py)."""

from __future__ import annotations

import resource
from collections.abc import Callable
from typing import Any

from xmfu.harness.engine.case import RunAborted
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import torch_device
from xmfu.workloads.collectives.spec import CollectiveCase
from xmfu.workloads.collectives.torch_dist import collective_call, guarded, rank_buffers
from xmfu.workloads.transformer.parallel import Collective, ddp_collectives


def ddp_bucket_bytes(ddp: Any) -> list[int] | None:
    """The byte size of each of DDP's gradient buckets, from its logging data (comma-separated;
    torch/nn/parallel/distributed.py `_get_ddp_logging_data`, a prototype interface). `bucket_sizes` are the
    buckets DDP was built with: without find_unused_parameters, one bucket of every parameter (distributed.py,
    compute_bucket_size_limits: sys.maxsize). DDP rebuilds them in gradient order at the start of the second
    iteration and logs them as `rebuilt_bucket_sizes` at the next synchronised forward (torch/csrc/distributed/
    c10d/logger.cpp, set_runtime_stats_and_log), so read this after three steps; until then the built ones.
    None when absent."""
    try:
        data = ddp._get_ddp_logging_data()
        text = str(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes", ""))
    except Exception:  # a prototype interface: its absence is recorded, not fatal
        return None
    sizes = [int(s) for s in text.split(",") if s.strip().isdigit()]
    return sizes or None


def ddp_step_collectives(ddp: Any, model_spec: Any) -> tuple[list[Collective], str]:
    buckets = ddp_bucket_bytes(ddp)
    source = "DDP's buckets (_get_ddp_logging_data)" if buckets else (
        "one all-reduce of every gradient (DDP's bucket sizes unreadable)")
    return ddp_collectives(model_spec, buckets), source


def collectives_alone(collectives: list[Collective], ctx: RunContext, dist: Any) -> Callable[[], None]:
    """One step's collectives in order, on buffers allocated once (collectives of one size and type share
    them: every block's group is the same size). A failure is a broken group: RunAborted."""
    buffers: dict[tuple[str, int, str], Callable[[], Any]] = {}
    calls = []
    for c in collectives:
        key = (c.op, c.size_bytes, c.dtype)
        if key not in buffers:
            case = CollectiveCase(c.op, c.size_bytes, c.dtype, in_place=c.op == "all_reduce", mode="throughput")
            inp, out, _ = rank_buffers(case, ctx, dist)
            buffers[key] = collective_call(case, dist, inp, out)
        calls.append(buffers[key])

    def run() -> None:
        for call in calls:
            call()

    return guarded(run)


def peak_memory_now(device: str) -> int | None:
    """This rank's peak so far: the allocator's on an accelerator (torch.cuda.max_memory_allocated on CUDA/ROCm;
    machine/torch_device.py elsewhere: None, not measured, where that torch has no such call), the process's max
    RSS on a host (Linux: KiB)."""
    import torch

    if torch_device.on_accelerator(device):
        return torch_device.max_memory_allocated(torch, device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_memory(device: str) -> None:
    """Start the allocator's peak afresh on an accelerator (torch.cuda.reset_peak_memory_stats on CUDA/ROCm);
    nothing on a host, whose max RSS cannot be reset."""
    import torch

    if torch_device.on_accelerator(device):
        torch_device.reset_peak_memory_stats(torch, device)


def rank_gather(dist: Any, notes: dict[str, Any], peak: int | None) -> Callable[[list[float]], list[list[float]]]:
    """Every rank's samples (and, once, every rank's peak memory into `notes`): the engine's gather hook."""

    def gather(samples: list[float]) -> list[list[float]]:
        everyone: list[Any] = [None] * dist.get_world_size()
        try:
            dist.all_gather_object(everyone, (samples, peak))
        except Exception as exc:  # a dead peer or a timeout: the group is broken for every later case
            raise RunAborted(f"gathering the ranks' samples failed: {str(exc).splitlines()[0][:300]}") from None
        notes["per_rank_peak_memory_bytes"] = [m for _, m in everyone]
        return [s for s, _ in everyone]

    return gather
