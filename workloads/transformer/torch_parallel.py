"""The training step across processes with torch's own data parallelism, one device per process (torchrun or
Slurm start them; workloads/collectives/torch_dist.py forms the group: nccl on CUDA, RCCL under the nccl name on
ROCm, gloo on a CPU, with the run's timeout):

- `ddp`: DistributedDataParallel, gradients all-reduced in buckets overlapped with the backward.
- `fsdp`: FSDP2 (`torch.distributed.fsdp.fully_shard`) on every block, then on the root; MixedPrecisionPolicy
  matching `dtype` (bf16: parameters all-gathered and computed in bf16, gradients reduce-scattered in fp32, as
  torchtitan does; fp32: none), under the same autocast as the single-device step.

Every rank runs the same fixed plan (no time-based stop rule); the slowest rank's time counts. Beside the step,
two variants are timed sample by sample with it: `no_comm`, the same step without its collectives (DDP under
`no_sync()`; for FSDP an unsharded local model in the all-gathered dtype on the same local batch plus AdamW on
tensors of this rank's shard shapes), and `comm_alone`, the step's collectives with nothing else
(torch_comm.py).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from typing import Any

from xmfu.harness.engine.case import FixedPlan, Prepared, RunAborted, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import torch_device
from xmfu.workloads.collectives.torch_dist import process_group
from xmfu.workloads.transformer import parallel
from xmfu.workloads.transformer.spec import TrainSpec
from xmfu.workloads.transformer.torch_comm import (
    collectives_alone,
    ddp_step_collectives,
    peak_memory_now,
    rank_gather,
    reset_peak_memory,
)
from xmfu.workloads.transformer.torch_model import Attend, Transformer, load_weights, sdpa_attend
from xmfu.workloads.transformer.torch_parity import distributed_check, single_device_reference
from xmfu.workloads.transformer.torch_profile import TRACE_NAME, chrome_trace
from xmfu.workloads.transformer.torch_train import ADAMW, NO_CUDA_GRAPH, loss_under_precision

# A DDP/FSDP step under graph capture fails the capturable=False check of the single-device step, and on every
# rank at once: _aborting would make that RunAborted and end the whole run. Its collectives (DDP's bucketed
# all-reduce, FSDP2's all-gather and reduce-scatter on their own streams) would also have to be captured, which
# xmfu does not attempt. The step and its variants are timed with events.
NO_CUDA_GRAPH_PARALLEL = NO_CUDA_GRAPH + "; its DDP/FSDP collectives would also have to be captured"


def unavailable(case: TrainSpec, platform_kind: str) -> str | None:
    if case.parallel == "ep":
        return None if case.model.moe else (f"ep splits a mixture of experts' experts over the ranks; model "
                                            f"{case.model.name} is dense")
    if case.distributed and case.model.moe:
        return parallel.MOE_NOT_DISTRIBUTED
    if case.distributed and case.parallel not in parallel.STRATEGIES["torch"]:
        return (f"{case.parallel} is a JAX strategy; torch backends run {' or '.join(parallel.STRATEGIES['torch'])} "
                "(under torchrun or Slurm)")
    if case.parallel == "fsdp" and platform_kind == "cpu" and not cpu_streams_record_events():
        return ("fsdp on a CPU needs torch.cpu.Stream.record_event, which this torch lacks (FSDP2's all-gather "
                "records an event on its stream: torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py; torch "
                "2.6 has none, 2.11 has it); ddp runs, and fsdp runs on a GPU")
    return None


def cpu_streams_record_events() -> bool:
    """Whether FSDP2 can run on CPU tensors here: it calls record_event() on the CPU stream (torch.cpu.Stream)."""
    import torch

    return hasattr(torch.cpu.Stream, "record_event")


def _aborting(fn: Callable[[], Any]) -> Callable[[], Any]:
    """A distributed step (or any collective of the preparation: DDP's construction, the rank map, the variants'
    agreement) that raises leaves the ranks out of step: anything but running out of memory (this row fails, as
    on one device) ends the run with a partial bundle instead of a hang at the next collective, or a next case
    prepared on a broken group (gloo raises a plain RuntimeError for a frozen peer: see torch_dist.guarded)."""
    import torch

    def run() -> Any:
        try:
            return fn()
        except (torch.OutOfMemoryError, RunAborted):
            raise
        except Exception as exc:
            raise RunAborted(f"distributed step failed: {str(exc).splitlines()[0][:300]}") from None

    return run


def _named(module: Any) -> list[tuple[str, Any]]:
    """Parameters under their state_dict names (torch.compile's wrapper adds `_orig_mod.`)."""
    return [(n.replace("._orig_mod", ""), p) for n, p in module.named_parameters()]


def _model(run: TrainSpec, device: str, attend: Attend, customize: Callable | None, compile_model: bool,
           dtype: Any = None) -> tuple[Any, dict[str, Any]]:
    import torch

    model = Transformer(run.model, attend, run.activation_checkpointing)
    load_weights(model, run.weights())
    notes = customize(model) if customize else {}
    model.to(device=device, dtype=dtype)
    if compile_model:  # block by block before wrapping, as torchtitan does (apply_compile, then DDP/FSDP)
        for i, layer in enumerate(model.layers):
            model.layers[i] = torch.compile(layer, dynamic=False)
    return model, notes


def _fsdp(model: Any, run: TrainSpec, kind: str, n: int) -> Any:
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cuda" if kind in ("cuda", "rocm") else "cpu", (n,))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if run.dtype == "bf16" \
        else MixedPrecisionPolicy()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    return fully_shard(model, mesh=mesh, mp_policy=mp)


def _wrap(model: Any, run: TrainSpec, ctx: RunContext, n: int) -> Any:
    if run.parallel == "fsdp":
        return _fsdp(model, run, ctx.platform.kind, n)
    from torch.nn.parallel import DistributedDataParallel

    gpu = ctx.platform.kind in ("cuda", "rocm")
    return DistributedDataParallel(model, device_ids=[ctx.device.index] if gpu else None)


def _train_step(model: Any, opt: Any, x: Any, y: Any, dtype: str,
                within: Callable[[], Any] = contextlib.nullcontext) -> Callable[[], Any]:
    """One AdamW step; its forward and backward run inside `within()`."""
    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        with within():
            loss = loss_under_precision(model, x, y, dtype)
            loss.backward()
        opt.step()
        return loss.detach()

    return step


def _no_comm_ddp(ddp: Any, opt: Any, x: Any, y: Any, dtype: str) -> Callable[[], Any]:
    """The DDP step under no_sync(): the same hooks and buckets, no all-reduce (torch DDP.no_sync docstring:
    the forward must be inside the context too). The replicas drift apart; nothing reads them afterwards."""
    return _train_step(ddp, opt, x, y, dtype, within=ddp.no_sync)


def _no_comm_fsdp(run: TrainSpec, fsdp: Any, x: Any, y: Any, build: Callable) -> Callable[[], Any]:
    """FSDP's per-rank work with nothing to communicate: forward and backward of the whole model (what the
    all-gathers deliver) in the all-gathered dtype on this rank's batch, then AdamW on tensors of this rank's
    shard shapes (what FSDP's optimizer steps)."""
    import torch

    local, _ = build(dtype=torch.bfloat16 if run.dtype == "bf16" else torch.float32)
    shards = [torch.zeros_like(p.to_local(), requires_grad=True) for p in fsdp.parameters()]
    for s in shards:
        s.grad = torch.zeros_like(s)  # kept across steps: the optimizer's work per step is the same
    opt = torch.optim.AdamW(shards, lr=run.lr, **ADAMW)

    def step() -> Any:
        local.zero_grad(set_to_none=True)
        loss = loss_under_precision(local, x, y, run.dtype)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def _variants(run: TrainSpec, ctx: RunContext, dist: Any, wrapped: Any, opt: Any, batch: tuple, build: Callable,
              notes: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    import torch

    if run.parallel == "ddp":
        no_comm: Callable[[], Any] | None = _no_comm_ddp(wrapped, opt, *batch, run.dtype)
    else:
        try:
            no_comm = _no_comm_fsdp(run, wrapped, *batch, build)
        except torch.OutOfMemoryError:  # an unsharded model may not fit where the sharded one does
            no_comm = None
        # Every rank times the same variants, or their turns with the step (and its collectives) and the
        # gathers of their samples would no longer line up: one rank without room drops it everywhere.
        fits = torch.tensor([0 if no_comm is None else 1], device=ctx.torch_device)
        _aborting(lambda: dist.all_reduce(fits, op=dist.ReduceOp.MIN))()
        if not int(fits):
            no_comm = None
            notes["no_comm"] = "not measured: the unsharded no-communication model does not fit every rank's device"
    alone: dict[str, Any] = {}

    def comm_alone() -> None:  # built at its first (warm-up) call: DDP has rebuilt its buckets by then
        if "call" not in alone:
            if run.parallel == "ddp":
                collectives, source = ddp_step_collectives(wrapped, run.model)
            else:
                collectives = parallel.fsdp_collectives(run.model, run.dtype, run.devices)
                source = "FSDP2 groups: one per block and the root, padded to the world size"
            notes["comm_alone_collectives"] = {"source": source, "collectives": [c.as_dict() for c in collectives]}
            alone["call"] = collectives_alone(collectives, ctx, dist)
        alone["call"]()

    out = {"comm_alone": comm_alone}
    if no_comm is not None:
        out["no_comm"] = _aborting(no_comm)
    return out


def prepare_parallel(case: TrainSpec, ctx: RunContext, *, attend: Attend = sdpa_attend, compile_model: bool = False,
                     customize: Callable | None = None, notes: dict[str, Any], timing_valid: bool = True,
                     timing_note: str = "") -> Prepared:
    import torch

    dist = process_group(ctx.platform.kind, ctx.device.index, case.timeout_s)
    n, rank = dist.get_world_size(), dist.get_rank()
    run = case.on_devices(n)
    why = run.split_problem()
    if why:
        raise Unavailable(why)
    device = ctx.torch_device
    torch.set_float32_matmul_precision("highest")  # fp32 means fp32; bf16 work runs under autocast
    ref = single_device_reference(run, device, attend) if rank == 0 else None  # freed before the model below

    def build(dtype: Any = None) -> tuple[Any, dict[str, Any]]:
        return _model(run, device, attend, customize, compile_model, dtype)

    model, custom_notes = build()
    wrapped = _aborting(lambda: _wrap(model, run, ctx, n))()  # DDP broadcasts the parameters: a collective
    opt = torch.optim.AdamW(wrapped.parameters(), lr=run.lr, **ADAMW)
    check = _aborting(lambda: distributed_check(run, dist, wrapped, _named(model), opt, ref,
                                                run.parallel == "fsdp"))()
    b = run.per_device_batch
    batch = tuple(torch.from_numpy(a[rank * b:(rank + 1) * b]).to(device) for a in run.batch_tokens())
    step = _aborting(_train_step(wrapped, opt, *batch, run.dtype))
    rank_map: list[Any] = [None] * n  # rank -> (host, local rank, device): who sat where in this run
    _aborting(lambda: dist.all_gather_object(rank_map, (socket.gethostname(), ctx.device.index, device)))()
    notes = {**notes, **custom_notes, "strategy": run.parallel, "world_size": n, "rank": rank, "rank_map": rank_map,
             "backend": dist.get_backend(), "mixed_precision": _precision(run),
             "comm": parallel.nominal(run, "torch"), "reference_device": check.get("reference_device")}
    prepared = Prepared(step, lambda select: check, "torch", timing_valid=timing_valid, timing_note=timing_note,
                        notes=notes, fixed=FixedPlan(run.warmup, run.samples, 1), rank_combine="max", case=run,
                        no_cuda_graph=NO_CUDA_GRAPH_PARALLEL)
    if timing_valid:
        _ready(prepared, run, ctx, dist, wrapped, opt, batch, build)
    return prepared


def _ready(prepared: Prepared, run: TrainSpec, ctx: RunContext, dist: Any, wrapped: Any, opt: Any, batch: tuple,
           build: Callable) -> None:
    """The untimed first step (optimizer state, compilation), this rank's peak memory before any variant
    exists, the profiler trace (rank 0), the variants and the gather hook."""
    device = ctx.torch_device
    reset_peak_memory(device)
    prepared.fn()
    peak = peak_memory_now(device)
    prepared.peak_memory = lambda: peak if torch_device.on_accelerator(device) else None
    if run.profile:  # every rank runs the step; rank 0's trace goes into the bundle
        trace = chrome_trace(prepared.fn, device) if dist.get_rank() == 0 else prepared.fn()
        if isinstance(trace, bytes):
            prepared.attachments[TRACE_NAME] = trace
    prepared.variants = _variants(run, ctx, dist, wrapped, opt, batch, build, prepared.notes)
    prepared.gather = rank_gather(dist, prepared.notes, peak)


def _precision(run: TrainSpec) -> str:
    if run.parallel == "fsdp" and run.dtype == "bf16":
        return "FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) + bf16 autocast, fp32 master weights"
    return "bf16 autocast, fp32 master weights" if run.dtype == "bf16" else "fp32"
