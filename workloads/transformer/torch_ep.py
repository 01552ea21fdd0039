"""Expert parallelism (`workload.parallel=ep`, torch): a mixture of experts' routed experts split over the ranks,
tokens sent to their experts' rank and back with all-to-all-v, everything else replicated.

Rank r holds experts [r·E/n, (r+1)·E/n) of every MoE block and a whole copy of every other parameter. In each MoE
block it routes its own tokens, sends each assignment's activations to the rank that holds its expert
(all-to-all-v with this step's split sizes, differentiable: the backward runs the reverse exchange), runs its
local experts as one grouped GEMM, and sends the outputs back (the combine).
The load-balancing term uses the global token shares f_e (an all-reduce of the counts) and this rank's mean router
probabilities, so the ranks' mean loss is the single-device step's on the same global batch (aux is linear in the
probabilities). After the backward the replicated parameters' gradients are averaged over the ranks (one
all-reduce) and each expert's gradient, which collected every rank's tokens through the exchange, is divided by n.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from xmfu.workloads.transformer.parallel import ep_exchange_bytes
from xmfu.workloads.transformer.torch_moe import GROUPED, MoE, expert_gemm, grouped_matmul


class ExpertParallelMoE(nn.Module):
    """The MoE block of torch_moe.py with its experts split over the ranks of `dist`'s default group."""

    def __init__(self, moe: MoE, dist: Any) -> None:
        super().__init__()
        self.spec, self.dist = moe.spec, dist
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.local = moe.spec.n_experts // self.n
        first = self.rank * self.local
        self.router, self.shared = moe.router, moe.shared
        self.experts = nn.Module()
        for name in ("w1", "w3", "w2"):
            full = getattr(moe.experts, name)
            setattr(self.experts, name, nn.Parameter(full.detach()[first:first + self.local].clone()))
        self.counts: torch.Tensor | None = None  # (E,) global tokens per expert in the last forward
        self.aux: torch.Tensor | None = None
        self.sent_bytes = 0.0  # bytes this rank's exchanges of the last step put on links (forward and backward)
        self.splits: tuple[list[int], list[int], int, torch.dtype] | None = None

    def _exchange(self, x: torch.Tensor, send: list[int], recv: list[int]) -> torch.Tensor:
        """x's rows, send[q] of them to rank q in turn; back: recv[q] rows from each rank q. Differentiable: its
        backward is the reverse exchange (torch 2.13 _functional_collectives.all_to_all_single_autograd)."""
        from torch.distributed._functional_collectives import all_to_all_single_autograd

        return all_to_all_single_autograd(x.contiguous(), recv, send, self.dist.group.WORLD)

    def _local_experts(self, xs: torch.Tensor, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """xs (N, D) received, ids (N,) their local expert: the experts' SwiGLU, in xs's order."""
        order = ids.argsort(stable=True)
        counts = torch.zeros(self.local, dtype=torch.long, device=xs.device).scatter_add_(0, ids, torch.ones_like(ids))
        path, _ = expert_gemm(self.spec, xs.device.type, dtype)
        loop = None if path == GROUPED else counts.tolist()
        offsets = counts.cumsum(0).to(torch.int32)
        w, sorted_x = self.experts, xs[order].to(dtype)
        h = F.silu(grouped_matmul(sorted_x, w.w1.to(dtype), loop, offsets)) * grouped_matmul(
            sorted_x, w.w3.to(dtype), loop, offsets)
        out = grouped_matmul(h, w.w2.to(dtype), loop, offsets)
        return out[order.argsort()]  # back to the received order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        e, k, n = self.spec.n_experts, self.spec.top_k, self.n
        flat = x.reshape(b * s, d)  # (T, D) this rank's tokens
        weights, experts, probs = MoE.route(self, flat)  # the same routing as the single-device block
        assignments = experts.flatten()  # (T·k,)
        local_counts = torch.zeros(e, dtype=torch.long, device=x.device).scatter_add_(
            0, assignments, torch.ones_like(assignments))
        counts = local_counts.clone()
        self.dist.all_reduce(counts)  # global tokens per expert: the load-balancing term's f_e
        self.counts = counts
        self.aux = e * torch.sum(counts.to(probs.dtype) / (n * b * s * k) * probs.mean(0))
        order = assignments.argsort(stable=True)  # by expert, hence by the rank holding it
        token = order // k
        send = local_counts.view(n, self.local).sum(1)  # (n,) assignments for each rank's experts
        recv = torch.empty_like(send)
        self.dist.all_to_all_single(recv, send)
        send_l, recv_l = send.tolist(), recv.tolist()
        ids = torch.empty(sum(recv_l), dtype=torch.long, device=x.device)
        self.dist.all_to_all_single(ids, (assignments[order] % self.local).contiguous(), recv_l, send_l)
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        received = self._exchange(flat[token].to(dtype), send_l, recv_l)  # dispatch
        back = self._exchange(self._local_experts(received, ids, dtype), recv_l, send_l)  # combine
        self.sent_bytes = ep_exchange_bytes(send_l, recv_l, self.rank, d * dtype.itemsize)
        self.splits = (send_l, recv_l, d, dtype)  # the last forward's exchanges, for timing them alone
        combined = torch.zeros(b * s, d, dtype=weights.dtype, device=x.device)
        combined = combined.index_add(0, token, back.to(weights.dtype) * weights.flatten()[order, None])
        if self.shared is not None:
            combined = combined + self.shared(flat).to(weights.dtype)
        return combined.to(x.dtype).reshape(b, s, d)


def split_experts(model: Any, dist: Any) -> list[ExpertParallelMoE]:
    """Replace every MoE block of `model` (a torch_model.Transformer with all experts loaded) by its
    expert-parallel form; returns them."""
    blocks = []
    for layer in model.layers:
        if isinstance(layer.feed_forward, MoE):
            layer.feed_forward = ExpertParallelMoE(layer.feed_forward, dist)
            blocks.append(layer.feed_forward)
    return blocks


def expert_params(model: Any) -> set[int]:
    return {id(p) for n, p in model.named_parameters() if ".experts." in n}


def sync_grads(model: Any, dist: Any) -> None:
    """Average the replicated parameters' gradients (one all-reduce of them all, flattened) and divide the local
    experts' by n (each already summed every rank's tokens through the exchange's backward)."""
    n, local = dist.get_world_size(), expert_params(model)
    replicated = [p for p in model.parameters() if id(p) not in local and p.grad is not None]
    flat = torch.cat([p.grad.reshape(-1) for p in replicated])
    dist.all_reduce(flat)
    flat /= n
    offset = 0
    for p in replicated:
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
        offset += p.numel()
    for p in model.parameters():
        if id(p) in local and p.grad is not None:
            p.grad /= n


def full_parameters(model: Any, dist: Any) -> list[tuple[str, torch.Tensor]]:
    """Every parameter under its single-device name, the experts gathered from every rank (a collective)."""
    local, n = expert_params(model), dist.get_world_size()
    out = []
    for name, p in model.named_parameters():
        if id(p) in local:
            parts = [torch.empty_like(p.detach()) for _ in range(n)]
            dist.all_gather(parts, p.detach().contiguous())
            out.append((name, torch.cat(parts)))
        else:
            out.append((name, p.detach()))
    return out


def exchanges_alone(blocks: list[ExpertParallelMoE], model: Any, dist: Any) -> Any:
    """The step's collectives alone, at the sizes of the last step's routing: per MoE block the dispatch and the
    combine, forward and reversed for the backward (plain all_to_all_single on preallocated buffers), then the
    replicated gradients' all-reduce."""
    calls = []
    for blk in blocks:
        send, recv, d, dtype = blk.splits
        device = next(blk.parameters()).device
        out_buf = torch.zeros(sum(send), d, dtype=dtype, device=device)
        in_buf = torch.zeros(sum(recv), d, dtype=dtype, device=device)
        for _ in range(2):  # forward: dispatch, combine; backward: the same two reversed
            calls.append(lambda o=in_buf, i=out_buf, r=recv, s=send: dist.all_to_all_single(o, i, r, s))
            calls.append(lambda o=out_buf, i=in_buf, r=send, s=recv: dist.all_to_all_single(o, i, r, s))
    local = expert_params(model)
    grads = torch.zeros(sum(p.numel() for p in model.parameters() if id(p) not in local),
                        device=next(model.parameters()).device)
    calls.append(lambda: dist.all_reduce(grads))

    def run() -> None:
        for call in calls:
            call()

    return run
