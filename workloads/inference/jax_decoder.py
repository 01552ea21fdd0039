"""The JAX model of workloads/transformer/jax_model.py run against a static KV cache.

The same named weights, linear layers, RMSNorm and rotary embeddings as the training step's JAX model (its own
functions), with K and V written into a preallocated cache. Cache layout: (L, B, C, Hkv, Dh), JAX's (B, S, H, D)
order per layer. Prefill attends causally over the prompt's slots (a static slice, since it always starts at 0);
a decode step attends every slot with the unfilled ones masked, so one compiled program serves every position.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jax
import jax.numpy as jnp

from xmfu.workloads.transformer.jax_model import _linear, _rms_norm, _rope, rope_tables
from xmfu.workloads.transformer.spec import ModelSpec

Params = dict[str, jax.Array]
Cache = dict[str, jax.Array]


def empty_cache(spec: ModelSpec, batch: int, cache_len: int, dtype: Any) -> Cache:
    shape = (spec.n_layers, batch, cache_len, spec.n_kv_heads, spec.head_dim)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, start: jax.Array | int, prefill: bool) -> jax.Array:
    """q (B, S, H, Dh) at positions start.. ; k, v (B, C, Hkv, Dh), the layer's whole cache."""
    if prefill:  # positions 0..S-1 against slots 0..S-1
        s = q.shape[1]
        return jax.nn.dot_product_attention(q, k[:, :s], v[:, :s], is_causal=True)
    visible = jnp.arange(k.shape[1]) <= start  # one new token at `start` sees slots 0..start
    return jax.nn.dot_product_attention(q, k, v, mask=visible[None, None, None, :])


def forward(spec: ModelSpec, params: Params, cache: Cache, tokens: jax.Array, start: jax.Array | int,
            prefill: bool, dtype: Any) -> tuple[Cache, jax.Array]:
    """tokens (B, S) at positions start..start+S-1 -> (the updated cache, fp32 logits (B, V) of the last one)."""
    b, s = tokens.shape
    h, hkv, dh = spec.n_heads, spec.n_kv_heads, spec.head_dim
    cos, sin = rope_tables(replace(spec, seq_len=cache["k"].shape[2]))  # (C, Dh/2)
    rope = (jax.lax.dynamic_slice_in_dim(cos, start, s), jax.lax.dynamic_slice_in_dim(sin, start, s))
    ck, cv = cache["k"], cache["v"]
    x = params["tok_embeddings.weight"][tokens]  # (B, S, D)
    for i in range(spec.n_layers):
        pre = f"layers.{i}."
        hn = _rms_norm(x, params[pre + "attention_norm.weight"], spec.norm_eps)
        q = _rope(_linear(hn, params[pre + "attention.wq.weight"], dtype).reshape(b, s, h, dh), *rope)
        k = _rope(_linear(hn, params[pre + "attention.wk.weight"], dtype).reshape(b, s, hkv, dh), *rope)
        v = _linear(hn, params[pre + "attention.wv.weight"], dtype).reshape(b, s, hkv, dh)
        ck = jax.lax.dynamic_update_slice(ck, k[None].astype(ck.dtype), (i, 0, start, 0, 0))
        cv = jax.lax.dynamic_update_slice(cv, v[None].astype(cv.dtype), (i, 0, start, 0, 0))
        o = _attend(q, ck[i], cv[i], start, prefill)
        x = x + _linear(o.reshape(b, s, h * dh), params[pre + "attention.wo.weight"], dtype)
        hn = _rms_norm(x, params[pre + "ffn_norm.weight"], spec.norm_eps)  # SwiGLU, as jax_model._block
        gate = jax.nn.silu(_linear(hn, params[pre + "feed_forward.w1.weight"], dtype))
        x = x + _linear(gate * _linear(hn, params[pre + "feed_forward.w3.weight"], dtype),
                        params[pre + "feed_forward.w2.weight"], dtype)
    last = _rms_norm(x[:, -1], params["norm.weight"], spec.norm_eps)
    return {"k": ck, "v": cv}, _linear(last, params["output.weight"], dtype).astype(jnp.float32)


def prefill_fn(spec: ModelSpec, prompt_len: int, dtype: Any):
    """(params, cache, tokens (B, C + 1)) -> (cache, tokens with position P filled, logits (B, V))."""

    def run(params: Params, cache: Cache, tokens: jax.Array):
        cache, logits = forward(spec, params, cache, tokens[:, :prompt_len], 0, True, dtype)
        return cache, tokens.at[:, prompt_len].set(jnp.argmax(logits, -1).astype(tokens.dtype)), logits

    return run


def step_fn(spec: ModelSpec, dtype: Any):
    """(params, cache, tokens, pos) -> (cache, tokens with position pos + 1 filled, logits (B, V))."""

    def run(params: Params, cache: Cache, tokens: jax.Array, pos: jax.Array):
        token = jax.lax.dynamic_slice_in_dim(tokens, pos, 1, axis=1)  # (B, 1)
        cache, logits = forward(spec, params, cache, token, pos, False, dtype)
        nxt = jnp.argmax(logits, -1).astype(tokens.dtype)[:, None]
        return cache, jax.lax.dynamic_update_slice(tokens, nxt, (0, pos + 1)), logits

    return run
