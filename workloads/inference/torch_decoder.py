"""The training model (workloads/transformer/torch_model.py) run against a static KV cache.

`CachedDecoder` holds the very `Transformer` the training step builds (its embedding, blocks, norms and output
layer, on the same weights) and runs each block's modules in the block's order, with two differences only: K and
V are written into a preallocated cache, and attention reads the cache. Shapes: B batch, S new tokens, C cache
slots (prompt + generation), H heads, Hkv kv heads, Dh head dim, V vocab.

Two ways to attend, chosen per call:
- `start` given (a host int: the position of the first new token): `attend_prefix(q, k_cache, v_cache, start)`,
  which reads only the filled slots (eager SDPA slices them; the Triton kernel takes a causal offset);
- `start` None (static shapes, for torch.compile and CUDA graphs, where a host int would recompile per position):
  SDPA over every slot, the ones after each query's position masked, as gpt-fast does with its static cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from xmfu.workloads.transformer.torch_model import Attention, Transformer, apply_rope, rope_tables

AttendPrefix = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]


def sdpa_prefix(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, start: int) -> torch.Tensor:
    """q (B, H, S, Dh) at positions start..start+S-1 against the filled slots 0..start+S-1. Either a prefill from
    position 0 (causal, SDPA's top-left alignment is then the right one) or one decode token (sees every slot)."""
    s = q.shape[2]
    if start and s > 1:
        raise ValueError("a chunk of several tokens after position 0 needs bottom-right causal alignment")
    end = start + s
    return F.scaled_dot_product_attention(q, k_cache[:, :, :end], v_cache[:, :, :end], is_causal=s > 1,
                                          enable_gqa=q.shape[1] != k_cache.shape[1])


class KVCache(nn.Module):
    """One layer's K and V, (B, Hkv, C, Dh), allocated once at the compute dtype."""

    def __init__(self, shape: tuple[int, int, int, int], dtype: torch.dtype, device: str) -> None:
        super().__init__()
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)


class CachedDecoder(nn.Module):
    def __init__(self, model: Transformer, batch: int, cache_len: int, attend_prefix: AttendPrefix = sdpa_prefix):
        super().__init__()
        spec, weight = model.spec, model.output.weight
        self.model, self.attend_prefix = model, attend_prefix
        shape = (batch, spec.n_kv_heads, cache_len, spec.head_dim)
        self.caches = nn.ModuleList(KVCache(shape, weight.dtype, weight.device) for _ in model.layers)
        cos, sin = rope_tables(replace(spec, seq_len=cache_len), weight.device)  # (C, Dh/2) each, fp32
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        visible = torch.tril(torch.ones(cache_len, cache_len, dtype=torch.bool, device=weight.device))
        self.register_buffer("visible", visible, persistent=False)  # row p: the slots position p may attend

    def static_buffers(self) -> list[torch.Tensor]:
        """The cache tensors, mutated in place by every call (torch.compile must treat them as static inputs)."""
        return [t for c in self.caches for t in (c.k, c.v)]

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, start: int | None = None) -> torch.Tensor:
        """tokens (B, S) at `positions` (S,) -> fp32 logits (B, V) of the last of them."""
        cos, sin = self.cos[positions], self.sin[positions]  # (S, Dh/2): the rotations of these positions
        m = self.model
        x = m.tok_embeddings(tokens)  # (B, S, D)
        for layer, cache in zip(m.layers, self.caches, strict=True):  # Block.forward, with the cache
            x = x + self._attention(layer.attention, layer.attention_norm(x), cos, sin, cache, positions, start)
            x = x + layer.feed_forward(layer.ffn_norm(x))
        return m.output(m.norm(x[:, -1])).float()  # (B, V)

    def _attention(self, attn: Attention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache,
                   positions: torch.Tensor, start: int | None) -> torch.Tensor:
        b, s, _ = x.shape
        h, hkv, dh = attn.spec.n_heads, attn.spec.n_kv_heads, attn.spec.head_dim
        q = apply_rope(attn.wq(x).view(b, s, h, dh).transpose(1, 2), cos, sin)  # (B, H, S, Dh)
        k = apply_rope(attn.wk(x).view(b, s, hkv, dh).transpose(1, 2), cos, sin)  # (B, Hkv, S, Dh)
        v = attn.wv(x).view(b, s, hkv, dh).transpose(1, 2)
        cache.k.index_copy_(2, positions, k)
        cache.v.index_copy_(2, positions, v)
        if start is not None:
            o = self.attend_prefix(q, cache.k, cache.v, start)
        else:
            mask = self.visible[positions][None, None]  # (1, 1, S, C)
            o = F.scaled_dot_product_attention(q, cache.k, cache.v, attn_mask=mask, enable_gqa=h != hkv)
        return attn.wo(o.transpose(1, 2).reshape(b, s, h * dh))
