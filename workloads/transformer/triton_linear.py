"""nn.Linear through xmfu's Triton GEMM (kernels/matmul.py), forward and backward, autocast-aware.

y = x Wᵀ; the backward is two more GEMMs: dx = dy W and dW = dyᵀ x (all through the same kernel).
"""

from __future__ import annotations

import torch
from torch import nn

from xmfu.kernels.matmul import matmul


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
    return matmul(a, b, out, "ieee" if a.dtype == torch.float32 else None)


class _TritonLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])  # (tokens, in)
        ctx.save_for_backward(x2, weight)
        return _mm(x2, weight.t()).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x2, weight = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1]).to(x2.dtype)  # (tokens, out)
        dx = _mm(dy2, weight).reshape(*dy.shape[:-1], weight.shape[1])
        dw = _mm(dy2.t(), x2)
        return dx, dw


class TritonLinear(nn.Linear):
    """Under autocast, inputs and weight are cast as autocast would (the casts stay in the autograd graph,
    so the fp32 master weight receives an fp32 gradient); the GEMMs then run in that dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device = x.device.type
        weight = self.weight
        if torch.is_autocast_enabled(device):
            dtype = torch.get_autocast_dtype(device)
            x, weight = x.to(dtype), weight.to(dtype)
        with torch.autocast(device, enabled=False):
            return _TritonLinearFn.apply(x, weight)


def use_triton_linears(model: nn.Module) -> int:
    """Swap every bias-free nn.Linear in `model` for a TritonLinear sharing its weight; returns how many."""
    swapped = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear and child.bias is None:
                new = TritonLinear(child.in_features, child.out_features, bias=False, device="meta")
                new.weight = child.weight
                setattr(module, name, new)
                swapped += 1
    return swapped
