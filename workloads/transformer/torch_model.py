"""The Llama-style decoder in torch (nanoGPT-like: the file reads as the spec). Shapes: B batch, S sequence,
D d_model, H heads, Hkv kv heads, Dh head dim, F ffn hidden, V vocab.

Attention is pluggable (`attend(q, k, v) -> o`, causal, (B, H, S, Dh)), so the same model runs with torch
SDPA or xmfu's Triton kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from xmfu.workloads.transformer.spec import ModelSpec
from xmfu.workloads.transformer.torch_moe import MoE

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def sdpa_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def rope_tables(spec: ModelSpec, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, (S, Dh/2): position p rotates pair i by p·theta^(-2i/Dh) (RoFormer, Su et al. 2021)."""
    inv = 1.0 / spec.rope_theta ** (torch.arange(0, spec.head_dim, 2, dtype=torch.float64) / spec.head_dim)
    angles = torch.outer(torch.arange(spec.seq_len, dtype=torch.float64), inv)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (first half, second half) pairs of x (B, H, S, Dh), the Llama 'rotate_half' layout."""
    seq = x.shape[2]
    x1, x2 = x.float().chunk(2, dim=-1)
    c, s = cos[:seq], sin[:seq]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()  # statistics in fp32 even under autocast
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, attend: Attend) -> None:
        super().__init__()
        self.spec, self.attend = spec, attend
        kv = spec.n_kv_heads * spec.head_dim
        self.wq = nn.Linear(spec.d_model, spec.d_model, bias=False)
        self.wk = nn.Linear(spec.d_model, kv, bias=False)
        self.wv = nn.Linear(spec.d_model, kv, bias=False)
        self.wo = nn.Linear(spec.d_model, spec.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h, hkv, dh = self.spec.n_heads, self.spec.n_kv_heads, self.spec.head_dim
        q = self.wq(x).view(b, s, h, dh).transpose(1, 2)  # (B, H, S, Dh)
        k = self.wk(x).view(b, s, hkv, dh).transpose(1, 2)  # (B, Hkv, S, Dh)
        v = self.wv(x).view(b, s, hkv, dh).transpose(1, 2)
        o = self.attend(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)  # (B, H, S, Dh)
        return self.wo(o.transpose(1, 2).reshape(b, s, h * dh))


class FeedForward(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.w1 = nn.Linear(spec.d_model, spec.ffn_hidden, bias=False)  # gate
        self.w3 = nn.Linear(spec.d_model, spec.ffn_hidden, bias=False)  # up
        self.w2 = nn.Linear(spec.ffn_hidden, spec.d_model, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # SwiGLU (Shazeer 2020)


class Block(nn.Module):
    def __init__(self, spec: ModelSpec, attend: Attend, index: int = 0) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(spec.d_model, spec.norm_eps)
        self.attention = Attention(spec, attend)
        self.ffn_norm = RMSNorm(spec.d_model, spec.norm_eps)
        self.feed_forward = MoE(spec) if spec.is_moe_layer(index) else FeedForward(spec)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec, attend: Attend = sdpa_attend, checkpointing: bool = False) -> None:
        super().__init__()
        self.spec, self.checkpointing = spec, checkpointing
        self.tok_embeddings = nn.Embedding(spec.vocab, spec.d_model)
        self.layers = nn.ModuleList(Block(spec, attend, i) for i in range(spec.n_layers))
        self.norm = RMSNorm(spec.d_model, spec.norm_eps)
        self.output = nn.Linear(spec.d_model, spec.vocab, bias=False)
        self.rope: tuple[torch.Tensor, torch.Tensor] | None = None

    def moe_layers(self) -> list[Any]:
        """The MoE blocks' MLPs: torch_moe.MoE, or its expert-parallel form (torch_ep.py), both with `counts` and
        `aux`."""
        return [layer.feed_forward for layer in self.layers if hasattr(layer.feed_forward, "aux")]

    def routing_counts(self) -> torch.Tensor | None:
        """(MoE blocks, E): tokens each expert got in the last forward; None for a dense model."""
        moe = self.moe_layers()
        return torch.stack([m.counts for m in moe]) if moe and all(m.counts is not None for m in moe) else None

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy of tokens (B, S) against targets (B, S), plus aux_loss_coef x the MoE
        blocks' load-balancing terms (torch_moe.py) for a mixture of experts."""
        if self.rope is None or self.rope[0].device != tokens.device:
            self.rope = rope_tables(self.spec, tokens.device)
        cos, sin = self.rope
        x = self.tok_embeddings(tokens)  # (B, S, D)
        for layer in self.layers:
            x = checkpoint(layer, x, cos, sin, use_reentrant=False) if self.checkpointing else layer(x, cos, sin)
        logits = self.output(self.norm(x))  # (B, S, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten().long())
        moe = self.moe_layers()
        return loss + self.spec.aux_loss_coef * sum(m.aux for m in moe) if moe else loss


def load_weights(model: Transformer, weights: dict[str, np.ndarray]) -> None:
    state = {n: torch.from_numpy(w) for n, w in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=True)
    assert not missing and not unexpected


def grad_norm(model: nn.Module) -> torch.Tensor:
    """Global L2 norm of all gradients (what clipping would use)."""
    return torch.linalg.vector_norm(torch.stack([p.grad.detach().float().norm() for p in model.parameters()]))
