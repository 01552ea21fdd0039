"""The mixture-of-experts MLP in JAX, as torch_moe.py computes it (the same routing, load-balancing term and
weights): the routed experts as one `jax.lax.ragged_dot` per projection over the tokens sorted by expert.
Shapes: T tokens, D d_model, E experts, k top_k, F expert width."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from xmfu.workloads.transformer.spec import ModelSpec

Params = dict[str, jax.Array]
Linear = Callable[[jax.Array, Params, str, Any], jax.Array]  # (x, params, weight name, dtype) -> x @ wᵀ
EXPERT_GEMM = "jax.lax.ragged_dot (one grouped GEMM for all experts)"


def linear(x: jax.Array, w: jax.Array, dtype: Any) -> jax.Array:
    """x (..., in) @ w (out, in)ᵀ in `dtype` (torch's weight layout): every JAX linear layer that is not fp8."""
    return jnp.einsum("...i,oi->...o", x.astype(dtype), w.astype(dtype))


def plain_linear(x: jax.Array, p: Params, name: str, dtype: Any) -> jax.Array:
    return linear(x, p[name], dtype)


def _swiglu(x: jax.Array, p: Params, prefix: str, dtype: Any, linear: Linear) -> jax.Array:
    def lin(a, w):
        return linear(a, p, prefix + w + ".weight", dtype)

    return lin(jax.nn.silu(lin(x, "w1")) * lin(x, "w3"), "w2")


def ragged(x: jax.Array, w: jax.Array, sizes: jax.Array, dtype: Any) -> jax.Array:
    """x (N, in) sorted by expert, w (E, out, in): rows of group e times w[e]ᵀ."""
    return jax.lax.ragged_dot(x.astype(dtype), jnp.swapaxes(w, 1, 2).astype(dtype), sizes)


def route(spec: ModelSpec, p: Params, prefix: str, flat: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """flat (T, D) -> (the top-k weights renormalised (T, k), their experts (T, k), router probabilities (T, E)),
    in fp32 as torch_moe.py's MoE.route."""
    probs = jax.nn.softmax(flat.astype(jnp.float32) @ p[prefix + "router.weight"].astype(jnp.float32).T, axis=-1)
    weights, experts = jax.lax.top_k(probs, spec.top_k)  # (T, k)
    return weights / jnp.sum(weights, axis=-1, keepdims=True), experts, probs


def shared_expert(spec: ModelSpec, p: Params, prefix: str, flat: jax.Array, dtype: Any,
                  linear: Linear = plain_linear) -> jax.Array | float:
    """The shared expert's output (T, D) in fp32, or 0 where the shape has none; `linear` runs its layers
    (jax_model.proj: in fp8 under an fp8 recipe)."""
    if not spec.n_shared_experts:
        return 0.0
    return _swiglu(flat, p, prefix + "shared.", dtype, linear).astype(jnp.float32)


def moe(spec: ModelSpec, p: Params, prefix: str, x: jax.Array, dtype: Any,
        linear: Linear = plain_linear) -> tuple[jax.Array, jax.Array, jax.Array]:
    """x (B, S, D) -> (output (B, S, D) in x's dtype, tokens per expert (E,), the load-balancing term). `linear`
    runs the shared expert's layers (jax_model.proj: in fp8 under an fp8 recipe)."""
    b, s, d = x.shape
    e, k = spec.n_experts, spec.top_k
    flat = x.reshape(b * s, d)  # (T, D)
    weights, experts, probs = route(spec, p, prefix, flat)
    counts = jnp.bincount(experts.reshape(-1), length=e)  # (E,)
    aux = e * jnp.sum(counts.astype(jnp.float32) / (b * s * k) * jnp.mean(probs, axis=0))
    order = jnp.argsort(experts.reshape(-1), stable=True)  # the T·k assignments, grouped by expert
    token = order // k
    xs, sizes = flat[token], counts.astype(jnp.int32)  # (T·k, D)
    h = jax.nn.silu(ragged(xs, p[prefix + "experts.w1"], sizes, dtype)) * ragged(xs, p[prefix + "experts.w3"],
                                                                                   sizes, dtype)  # (T·k, F)
    out = ragged(h, p[prefix + "experts.w2"], sizes, dtype).astype(jnp.float32) * weights.reshape(-1)[order, None]
    combined = jnp.zeros((b * s, d), jnp.float32).at[token].add(out) + shared_expert(spec, p, prefix, flat, dtype,
                                                                                      linear)
    return combined.astype(x.dtype).reshape(b, s, d), jax.lax.stop_gradient(counts), aux
