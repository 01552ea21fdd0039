"""Step-0 parity of a distributed torch step (DDP or FSDP) with the single-device step on the same global batch.

The check batch is one sequence per device (the global batch's first sequences, at most CHECK_TOKENS tokens).
Rank 0 runs the single-device step on all of them first, keeps its loss, gradient norm and parameters after
one AdamW step on the host, and frees its model before the distributed one is built; every rank then runs the
distributed step on its own sequence. Rank 0 compares and broadcasts the numbers, so every rank decides the
same status (a rank that decided otherwise would leave the others waiting in the next collective).
"""

from __future__ import annotations

import gc
import math
from typing import Any

from xmfu.harness.machine import torch_device
from xmfu.workloads.transformer.spec import TrainSpec
from xmfu.workloads.transformer.torch_model import Attend, Transformer, load_weights
from xmfu.workloads.transformer.torch_train import ADAMW, loss_under_precision


def check_batch(run: TrainSpec, device: str) -> tuple[Any, Any]:
    """(tokens, targets) of the parity check: the first `devices` sequences, (devices, T)."""
    import torch

    rows = run.check_rows()
    return tuple(torch.from_numpy(a[: rows["batch"], : rows["tokens"]]).to(device) for a in run.batch_tokens())


def _single_device_step(run: TrainSpec, device: str, attend: Attend) -> dict[str, Any]:
    import torch

    model = Transformer(run.model, attend, run.activation_checkpointing)
    load_weights(model, run.weights())
    model.to(device)
    x, y = check_batch(run, device)
    loss = loss_under_precision(model, x, y, run.dtype)
    loss.backward()
    out = {"loss": float(loss.detach()), "grad_norm": math.sqrt(_grad_square_sum(model.parameters()))}
    torch.optim.AdamW(model.parameters(), lr=run.lr, **ADAMW).step()
    out["params"] = {n: p.detach().float().cpu() for n, p in model.named_parameters()}
    return out


def single_device_reference(run: TrainSpec, device: str, attend: Attend) -> dict[str, Any]:
    """The single-device step on the check batch, on this rank's device, or on the host when the model and its
    optimizer state do not fit one device (the case FSDP exists for)."""
    import torch

    try:
        out = {**_single_device_step(run, device, attend), "device": device}
    except torch.OutOfMemoryError:
        gc.collect()
        torch_device.empty_cache(torch, device)  # torch.cuda.empty_cache() on CUDA/ROCm, as before
        out = {**_single_device_step(run, "cpu", attend), "device": "cpu (does not fit one device)"}
    gc.collect()
    torch_device.empty_cache(torch, device)  # nothing on the host
    return out


def _grad_square_sum(params: Any) -> float:
    """Sum of squared gradient entries this rank holds (an FSDP gradient is this rank's shard of a DTensor), in
    float64: a float32 norm of a million entries is off by ~1e-5 relative on a CPU, the size of the tolerance."""
    import torch

    total = 0.0
    for p in params:
        g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
        total += float(torch.linalg.vector_norm(g.detach().double())) ** 2
    return total


def _update_error(named: list[tuple[str, Any]], ref: dict[str, Any] | None, initial: dict[str, Any]) -> float:
    """||p_dist - p_single|| / ||p_single - p_initial|| on rank 0 (ref given); a sharded parameter is gathered
    one at a time (DTensor.full_tensor, a collective every rank joins)."""
    diff = update = 0.0
    for name, p in named:
        full = p.full_tensor() if hasattr(p, "full_tensor") else p
        if ref is None:
            continue
        got, want = full.detach().float().cpu(), ref["params"][name]
        diff += float((got - want).pow(2).sum())
        update += float((want - initial[name]).pow(2).sum())
    return math.sqrt(diff) / math.sqrt(update) if update else math.sqrt(diff)


def distributed_check(run: TrainSpec, dist: Any, model: Any, named: list[tuple[str, Any]], opt: Any,
                      ref: dict[str, Any] | None, sharded: bool) -> dict[str, Any]:
    """The distributed step on the check batch (this rank: sequence `rank`), one optimizer step, compared by
    rank 0 with `ref`; every rank returns the same numbers."""
    import torch

    rank, n = dist.get_rank(), dist.get_world_size()
    device = next(p for _, p in named).device
    # this rank's current device (process_group made it current): "cuda:N" from torch.cuda.current_device()
    device = "cpu" if device.type == "cpu" else torch_device.current_device(torch, device.type)
    x, y = (t[rank: rank + 1] for t in check_batch(run, device))
    loss = loss_under_precision(model, x, y, run.dtype)
    loss.backward()
    loss_sum = loss.detach().float().reshape(1).to(device)
    dist.all_reduce(loss_sum)  # equal tokens per rank: the global mean is the mean of the ranks' means
    square = torch.tensor([_grad_square_sum([p for _, p in named])], dtype=torch.float64, device=device)
    if sharded:  # FSDP: each rank holds a shard of every gradient; DDP: every rank holds the averaged whole
        dist.all_reduce(square)
    opt.step()
    opt.zero_grad(set_to_none=True)
    initial = {k: torch.from_numpy(v) for k, v in run.weights().items()} if ref is not None else {}
    error = _update_error(named, ref, initial)
    result = [{"loss": float(loss_sum) / n, "grad_norm": math.sqrt(float(square)), "update_error": error,
               "ref_loss": ref["loss"] if ref else None, "ref_grad_norm": ref["grad_norm"] if ref else None,
               "reference_device": ref["device"] if ref else None}]
    dist.broadcast_object_list(result, src=0)
    rows = run.check_rows()
    return {**result[0], "sequences": rows["batch"], "tokens": rows["tokens"], "devices": n}
