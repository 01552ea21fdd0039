"""torch.distributed collectives: `nccl` on CUDA (RCCL under the same name on ROCm), `gloo` on a CPU, and on another
accelerator the backend torch maps its device type to (`Backend.default_device_backend_map`, torch 2.6.0 and 2.13
distributed_c10d.py: "xpu" -> `xccl` built in; a vendor package registers its own, e.g. Gaudi's `hccl`, through
`Backend.register_backend(..., devices=[...])`). A device type with no registered backend is refused, never run
over gloo, whose tensors live on the host.

Processes come from the launcher (torchrun, or Slurm via Hydra's submitit launcher); without one, a single
rank runs on its own store. The process group's timeout bounds every collective: a rank that never joins or
dies raises instead of hanging, and the run ends with a `partial` bundle.

An `nccl` group has no CPU backend: a host tensor in any collective fails with "No backend type associated with
device type cpu" (torch/csrc/distributed/c10d/ProcessGroup.cpp, ProcessGroup::getBackend), so every tensor here,
the bookkeeping ones included, lives on this rank's device. Its object collectives and barrier serialise onto
torch.cuda.current_device() (torch 2.13 distributed_c10d.py: _get_object_coll_device, all_gather_object,
barrier), so that device is set to this rank's GPU before any of them.
"""

from __future__ import annotations

import atexit
import datetime
import os
import socket
from typing import Any

import numpy as np

from xmfu.harness.engine.case import FixedPlan, Prepared, RunAborted, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import torch_device
from xmfu.harness.machine.frameworks import to_torch, torch_unavailable
from xmfu.harness.machine.ranks import rendezvous_port, slurm_rendezvous
from xmfu.workloads.collectives.spec import CollectiveCase, expected_output, rank_input

NOT_IN_TORCH = {  # (op, in_place) that torch.distributed cannot express
    ("all_reduce", False): "torch.distributed.all_reduce works in place only",
    ("broadcast", False): "torch.distributed.broadcast works in place only",
    ("all_to_all", True): "all_to_all has no in-place form (neither in torch nor in NCCL)",
    ("all_to_all_v", True): "all_to_all_v has no in-place form (neither in torch nor in NCCL)",
}


def available(case: CollectiveCase, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind)
    if why:
        return False, why
    if (case.op, case.in_place) in NOT_IN_TORCH:
        return False, NOT_IN_TORCH[(case.op, case.in_place)]
    if ctx.platform.kind == "tpu":
        return False, "torch.distributed has no TPU backend here (use the jax backend)"
    if ctx.platform.kind not in ("cuda", "rocm", "cpu") and group_backend(ctx.platform.kind) is None:
        return False, (f"torch.distributed has no backend registered for {ctx.platform.kind} devices here "
                       "(torch.distributed.Backend.default_device_backend_map; the vendor's torch package "
                       "registers one, e.g. Gaudi's hccl)")
    return True, ""


def group_backend(kind: str) -> str | None:
    """The process group's backend for a platform kind: nccl on CUDA and ROCm, gloo on a CPU, else what torch maps
    the device type to (xccl for xpu; a vendor's registered one), None where nothing is registered."""
    import torch.distributed as dist

    if kind in ("cuda", "rocm"):
        return "nccl"
    if kind == "cpu":
        return "gloo"
    backend = dist.Backend.default_device_backend_map.get(kind)
    # "fake" is torch's testing backend (torch/testing/_internal/distributed/fake_pg.py registers it for cpu, cuda,
    # hpu and xpu when imported): it moves no data, so it is no backend to measure
    return None if backend in (None, "fake") else backend


def _slurm_env() -> None:
    """Under Slurm without torchrun, derive MASTER_ADDR/PORT, RANK, WORLD_SIZE from the job: for a job submitit
    started (Hydra's submitit launchers, which set SUBMITIT_EXECUTOR), its TorchDistributedEnvironment (the first
    host of the job), on the port ranks.rendezvous_port draws from the job id; for tasks `srun` started (a user's
    srun, xmfu fleet's steps), ranks.slurm_rendezvous, from the step's own variables. submitit's helper refuses a
    job it did not start ("Could not figure out which environment the job is running in",
    submitit/core/job_environment.py)."""
    if "MASTER_ADDR" in os.environ:
        return
    if os.environ.get("SUBMITIT_EXECUTOR") or "SUBMITIT_LOCAL_JOB_ID" in os.environ:
        from submitit.helpers import TorchDistributedEnvironment

        job = TorchDistributedEnvironment()  # MASTER_PORT if set, else submitit's draw (20000-60000: ephemeral ports)
        if "MASTER_PORT" not in os.environ:
            job.master_port = rendezvous_port(job._job_env.job_id)  # the job id submitit's own draw is seeded with
        job.export(set_cuda_visible_devices=False)
    elif "SLURM_JOB_ID" in os.environ:
        os.environ.update(slurm_rendezvous())


def process_group(kind: str, local_rank: int, timeout_s: float) -> Any:
    """The default process group, created once per process."""
    import torch
    import torch.distributed as dist

    if kind in ("cuda", "rocm"):  # also when the group already exists: the current device is per process
        torch.cuda.set_device(local_rank)  # CUDA-specific here: the nccl group below is CUDA/ROCm's
    elif kind != "cpu":  # another accelerator torch drives (xpu, hpu, neuron): through torch.accelerator
        torch_device.set_device(torch, local_rank)
    if dist.is_initialized():
        return dist
    backend = group_backend(kind)
    if backend is None:  # available() refuses such cases first; a direct caller gets the same reason
        raise RunAborted(f"torch.distributed has no backend registered for {kind} devices")
    timeout = datetime.timedelta(seconds=timeout_s)
    try:
        _slurm_env()
        if "WORLD_SIZE" in os.environ:
            dist.init_process_group(backend, timeout=timeout)  # env:// from the launcher
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    except Exception as exc:  # a rank that never joined, an unreachable master: the run cannot go on
        raise RunAborted(f"process group ({backend}) not formed within {timeout_s:g} s: {exc}") from None
    atexit.register(dist.destroy_process_group)
    return dist


def rank_buffers(case: CollectiveCase, ctx: RunContext, dist: Any) -> tuple[Any, Any, Any]:
    """(input, output, layout) for this rank; in-place ops alias input into output as NCCL defines it."""
    import torch

    rank, n = dist.get_rank(), dist.get_world_size()
    lay = case.layout(n)
    device = ctx.torch_device
    inp = to_torch(rank_input(case.op, rank, lay), case.dtype, device)
    if case.op in ("all_reduce", "broadcast"):
        return inp, inp, lay
    count = sum(lay.receives(rank)) if case.op == "all_to_all_v" else lay.output_count
    out = torch.empty(count, dtype=inp.dtype, device=device)
    if case.in_place and case.op == "all_gather":  # sendbuff = recvbuff + rank * count
        inp = out[rank * lay.input_count:(rank + 1) * lay.input_count].copy_(inp)
    elif case.in_place and case.op == "reduce_scatter":  # recvbuff = sendbuff + rank * recvcount
        out = inp[rank * lay.output_count:(rank + 1) * lay.output_count]
    return inp, out, lay


def collective_call(case: CollectiveCase, dist: Any, inp: Any, out: Any) -> Any:
    op = case.op
    if op == "all_to_all_v":  # uneven splits: this rank's send and receive counts (spec.alltoallv_splits)
        lay, rank = case.layout(dist.get_world_size()), dist.get_rank()
        sends, receives = lay.sends(rank), lay.receives(rank)
        return lambda: dist.all_to_all_single(out, inp, output_split_sizes=receives, input_split_sizes=sends)
    if op == "all_reduce":
        return lambda: dist.all_reduce(inp)
    if op == "broadcast":
        return lambda: dist.broadcast(inp, src=0)
    # torch 2.13 renamed the tensor forms (*_single); older releases only have *_into_tensor / *_tensor.
    if op == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, inp)
    if op == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(out, inp)
    return lambda: dist.all_to_all_single(out, inp)


def guarded(call: Any) -> Any:
    """`call` (a collective, or anything that runs one) with its failure made fatal to the run. gloo reports a
    frozen or dead peer as a plain RuntimeError ("Timed out waiting 3000ms for send operation to complete",
    "Connection reset by peer": torch 2.13, third_party/gloo/gloo/transport/tcp/), not as a
    torch.distributed.DistError, so the failure cannot be told apart by its type: every collective, in
    preparation as in timing, goes through here. A broken group stays broken for every later case."""
    def run() -> Any:
        try:
            return call()
        except RunAborted:
            raise
        except Exception as exc:
            raise RunAborted(f"collective failed: {str(exc).splitlines()[0][:300]}") from None
    return run


def prepare(case: CollectiveCase, ctx: RunContext) -> Prepared:
    import torch

    dist = process_group(ctx.platform.kind, ctx.device.index, case.timeout_s)
    rank, n = dist.get_rank(), dist.get_world_size()
    inp, out, lay = rank_buffers(case, ctx, dist)
    fresh = to_torch(rank_input(case.op, rank, lay), case.dtype, ctx.torch_device)
    call = guarded(collective_call(case, dist, inp, out))

    def result(select: Any) -> dict[str, int]:
        inp.copy_(fresh)  # in-place calls before this one changed the data
        call()
        got = out.detach().to(torch.float64).cpu().numpy()
        if case.inject_corruption and rank == n - 1:
            got[-1] += 1
        expected = expected_output(case.op, rank, n, lay)
        count = int(np.sum(got != expected)) if got.shape == expected.shape else expected.size
        wrong = torch.tensor([count], device=inp.device)  # on the group's device: nccl has no CPU backend
        guarded(lambda: dist.all_reduce(wrong))()  # every rank decides the same status, or the next one would hang
        elements = sum(map(sum, lay.splits)) if lay.splits else lay.output_count * n
        return {"wrong": int(wrong), "elements": elements, "ranks": n}

    def gather(samples: list[float]) -> list[list[float]]:
        everyone: list[Any] = [None] * n
        guarded(lambda: dist.all_gather_object(everyone, samples))()
        return everyone

    latency = case.mode == "latency"
    plan = FixedPlan(case.warmup, case.samples, 1 if latency else case.iters,
                     before_sample=guarded(dist.barrier) if latency else None)
    version = torch.cuda.nccl.version() if ctx.platform.kind in ("cuda", "rocm") else None
    ranks: list[Any] = [None] * n  # rank -> (host, local rank, device): who sat where in this run
    guarded(lambda: dist.all_gather_object(ranks, (socket.gethostname(), ctx.device.index, ctx.torch_device)))()
    notes = {"library": f"torch.distributed ({dist.get_backend()})", "ranks": n, "rank": rank,
             "nccl_version": ".".join(map(str, version)) if isinstance(version, tuple) else version,
             "bytes": lay.bytes, "in_place": case.in_place, "rank_map": ranks}
    if lay.splits:  # all_to_all_v: the busiest rank's send buffer, which the slowest transfer waits for
        notes["busiest_rank_send_bytes"] = max(map(sum, lay.splits)) * inp.element_size()
    if case.op == "broadcast" and n == 1:
        raise Unavailable("broadcast with one rank moves nothing")
    return Prepared(call, result, "torch", notes=notes, fixed=plan, gather=gather,
                    rank_combine="max" if latency else "mean")
