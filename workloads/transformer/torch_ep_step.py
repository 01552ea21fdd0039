"""The expert-parallel training step (torch_ep.py) under torchrun or Slurm: its parity with the single-device step,
its timed step and what its row records (the routing, the bytes the exchanges sent)."""

from __future__ import annotations

import math
import socket
from typing import Any

from xmfu.harness.engine.case import FixedPlan, Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.workloads.collectives.torch_dist import process_group
from xmfu.workloads.transformer.parallel import EP_FORMULA, ep_bytes_per_rank, ep_problem
from xmfu.workloads.transformer.spec import TrainSpec
from xmfu.workloads.transformer.torch_comm import peak_memory_now, rank_gather, reset_peak_memory
from xmfu.workloads.transformer.torch_ep import (
    exchanges_alone,
    full_parameters,
    split_experts,
    sync_grads,
)
from xmfu.workloads.transformer.torch_model import Attend, Transformer, load_weights, sdpa_attend
from xmfu.workloads.transformer.torch_parallel import _aborting  # the same rule for a step that raises
from xmfu.workloads.transformer.torch_parity import _update_error, check_batch, single_device_reference
from xmfu.workloads.transformer.torch_train import ADAMW, NO_CUDA_GRAPH, loss_under_precision, routing_log

EXCHANGES = ("the first step's exchanges replayed: per MoE block dispatch and combine, forward and reversed for "
             "the backward (all_to_all_single at that step's split sizes), then the replicated gradients' all-reduce")
NO_COMM = ("an expert-parallel step without its exchanges would not run the same experts on the same "
           "tokens, so there is no no-communication twin to subtract")


def _step(model: Any, opt: Any, dist: Any, x: Any, y: Any, dtype: str) -> Any:
    opt.zero_grad(set_to_none=True)
    loss = loss_under_precision(model, x, y, dtype)
    loss.backward()
    sync_grads(model, dist)
    opt.step()
    return loss.detach()


def _check(run: TrainSpec, model: Any, opt: Any, dist: Any, ref: dict[str, Any] | None, device: str) -> dict:
    """One step on the check batch (this rank: sequence `rank`), compared by rank 0 with the single-device step."""
    import torch

    rank, n = dist.get_rank(), dist.get_world_size()
    x, y = (t[rank: rank + 1] for t in check_batch(run, device))
    loss = loss_under_precision(model, x, y, run.dtype)
    loss.backward()
    sync_grads(model, dist)
    local = {id(p) for name, p in model.named_parameters() if ".experts." in name}
    square = [0.0, 0.0]  # replicated (the same on every rank), this rank's experts
    for p in model.parameters():
        square[id(p) in local] += float(torch.linalg.vector_norm(p.grad.detach().double())) ** 2
    sums = torch.tensor([float(loss.detach()), square[1]], dtype=torch.float64, device=device)
    dist.all_reduce(sums)
    opt.step()
    opt.zero_grad(set_to_none=True)
    initial = {k: torch.from_numpy(v) for k, v in run.weights().items()} if ref is not None else {}
    error = _update_error(full_parameters(model, dist), ref, initial)
    result = [{"loss": float(sums[0]) / n, "grad_norm": math.sqrt(square[0] + float(sums[1])),
               "update_error": error, "ref_loss": ref["loss"] if ref else None,
               "ref_grad_norm": ref["grad_norm"] if ref else None, "reference_device": ref["device"] if ref else None}]
    dist.broadcast_object_list(result, src=0)
    rows = run.check_rows()
    return {**result[0], "sequences": rows["batch"], "tokens": rows["tokens"], "devices": n}


def prepare_ep(case: TrainSpec, ctx: RunContext, *, attend: Attend = sdpa_attend, notes: dict[str, Any]) -> Prepared:
    import torch

    dist = process_group(ctx.platform.kind, ctx.device.index, case.timeout_s)
    n, rank = dist.get_world_size(), dist.get_rank()
    run = case.on_devices(n)
    why = ep_problem(run.model, n) or run.split_problem()
    if why:
        raise Unavailable(why)
    device = ctx.torch_device
    torch.set_float32_matmul_precision("highest")
    ref = single_device_reference(run, device, attend) if rank == 0 else None
    model = Transformer(run.model, attend, run.activation_checkpointing)
    load_weights(model, run.weights())
    blocks = split_experts(model, dist)
    model.to(device)
    routing = routing_log(run, model, device)
    opt = torch.optim.AdamW(model.parameters(), lr=run.lr, **ADAMW)
    check = _aborting(lambda: _check(run, model, opt, dist, ref, device))()
    b = run.per_device_batch
    x, y = (torch.from_numpy(a[rank * b:(rank + 1) * b]).to(device) for a in run.batch_tokens())
    sent: dict[str, float] = {}

    def step() -> Any:
        loss = _step(model, opt, dist, x, y, run.dtype)
        counts = model.routing_counts()
        routing.add(counts.max(-1).values.float() / counts.float().mean(-1))
        sent["bytes"] = sum(blk.sent_bytes for blk in blocks)
        return loss

    timed = _aborting(step)
    rank_map: list[Any] = [None] * n
    _aborting(lambda: dist.all_gather_object(rank_map, (socket.gethostname(), ctx.device.index, device)))()
    notes = {**notes, "strategy": "ep", "world_size": n, "rank": rank, "rank_map": rank_map,
             "backend": dist.get_backend(), "experts_per_rank": run.model.n_experts // n,
             "expert_gemm": routing.expert_gemm, "no_comm": NO_COMM,
             "mixed_precision": "bf16 autocast, fp32 master weights" if run.dtype == "bf16" else "fp32",
             "reference_device": check.get("reference_device")}
    prepared = Prepared(timed, lambda select: check, "torch", notes=notes, fixed=FixedPlan(run.warmup, run.samples, 1),
                        rank_combine="max", case=run, no_cuda_graph=NO_CUDA_GRAPH, recorded=routing.figures)
    reset_peak_memory(device)
    timed()  # the untimed first step: optimizer state
    peak = peak_memory_now(device)
    notes["comm"] = _comm(model, sent, n)
    notes["comm_alone_collectives"] = {"source": EXCHANGES, "collectives": []}
    prepared.variants = {"comm_alone": _aborting(exchanges_alone(blocks, model, dist))}
    prepared.gather = rank_gather(dist, notes, peak)
    return prepared


def _comm(model: Any, sent: dict[str, float], n: int) -> dict[str, Any]:
    """Bytes this rank sent in its first step: its exchanges (forward and reversed in the backward) and its share
    of the replicated gradients' all-reduce (parallel.py, shared with the JAX ep step)."""
    replicated = sum(p.numel() for name, p in model.named_parameters() if ".experts." not in name)
    exchanges = sent.get("bytes", 0.0)
    return {"bytes_per_rank": ep_bytes_per_rank(exchanges, replicated, n), "formula": EP_FORMULA,
            "exchange_bytes_per_rank": float(exchanges)}
