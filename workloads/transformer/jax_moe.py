"""The mixture-of-experts MLP in JAX, as torch_moe.py computes it (the same routing, load-balancing term and
weights): the routed experts as one `jax.lax.ragged_dot` per projection over the tokens sorted by expert.
Shapes: T tokens, D d_model, E experts, k top_k, F expert width."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from xmfu.workloads.transformer.spec import ModelSpec

Params = dict[str, jax.Array]
EXPERT_GEMM = "jax.lax.ragged_dot (one grouped GEMM for all experts)"


def _swiglu(x: jax.Array, w1: jax.Array, w3: jax.Array, w2: jax.Array, dtype: Any) -> jax.Array:
    def lin(a, w):
        return jnp.einsum("...i,oi->...o", a.astype(dtype), w.astype(dtype))

    return lin(jax.nn.silu(lin(x, w1)) * lin(x, w3), w2)


def _ragged(x: jax.Array, w: jax.Array, sizes: jax.Array, dtype: Any) -> jax.Array:
    """x (N, in) sorted by expert, w (E, out, in): rows of group e times w[e]ᵀ."""
    return jax.lax.ragged_dot(x.astype(dtype), jnp.swapaxes(w, 1, 2).astype(dtype), sizes)


def moe(spec: ModelSpec, p: Params, prefix: str, x: jax.Array, dtype: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    """x (B, S, D) -> (output (B, S, D) in x's dtype, tokens per expert (E,), the load-balancing term)."""
    b, s, d = x.shape
    e, k = spec.n_experts, spec.top_k
    flat = x.reshape(b * s, d)  # (T, D)
    probs = jax.nn.softmax(flat.astype(jnp.float32) @ p[prefix + "router.weight"].astype(jnp.float32).T, axis=-1)
    weights, experts = jax.lax.top_k(probs, k)  # (T, k)
    weights = weights / jnp.sum(weights, axis=-1, keepdims=True)
    counts = jnp.bincount(experts.reshape(-1), length=e)  # (E,)
    aux = e * jnp.sum(counts.astype(jnp.float32) / (b * s * k) * jnp.mean(probs, axis=0))
    order = jnp.argsort(experts.reshape(-1), stable=True)  # the T·k assignments, grouped by expert
    token = order // k
    xs, sizes = flat[token], counts.astype(jnp.int32)  # (T·k, D)
    h = jax.nn.silu(_ragged(xs, p[prefix + "experts.w1"], sizes, dtype)) * _ragged(xs, p[prefix + "experts.w3"],
                                                                                   sizes, dtype)  # (T·k, F)
    out = _ragged(h, p[prefix + "experts.w2"], sizes, dtype).astype(jnp.float32) * weights.reshape(-1)[order, None]
    combined = jnp.zeros((b * s, d), jnp.float32).at[token].add(out)
    if spec.n_shared_experts:
        combined = combined + _swiglu(flat, *(p[prefix + f"shared.{w}.weight"] for w in ("w1", "w3", "w2")),
                                      dtype).astype(jnp.float32)
    return combined.astype(x.dtype).reshape(b, s, d), jax.lax.stop_gradient(counts), aux
