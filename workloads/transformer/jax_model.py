"""The same Llama-style decoder as torch_model.py, in plain JAX, on the same named weights.

Weights stay in torch's (out, in) layout, so a linear layer is x @ Wᵀ and both frameworks load one array
set. Mixed precision: fp32 parameters, matmuls in `compute_dtype`, norms, softmax and loss in fp32.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from xmfu.workloads.transformer.fp8 import fp8_weight
from xmfu.workloads.transformer.jax_fp8 import fp8_linear
from xmfu.workloads.transformer.jax_moe import linear as _linear
from xmfu.workloads.transformer.jax_moe import moe
from xmfu.workloads.transformer.spec import ModelSpec

Params = dict[str, jax.Array]
# (spec, params, prefix, x (B, S, D), dtype) -> (output (B, S, D), tokens per expert (E,), load-balancing term)
# (spec, params, prefix, x, dtype, linear: the shared expert's layers) -> (output, tokens per expert, aux term)
MoEBlock = Callable[[ModelSpec, Params, str, jax.Array, Any, Callable], tuple[jax.Array, jax.Array, jax.Array]]


def proj(x: jax.Array, p: Params, name: str, dtype: Any, fp8: str = "none") -> jax.Array:
    """The linear layer of weight `name`: in fp8 (jax_fp8.py) where the recipe is not none and fp8.py chooses the
    layer, else in `dtype`."""
    w = p[name]
    return fp8_linear(x, w, dtype, fp8) if fp8 != "none" and fp8_weight(name, w.shape) else _linear(x, w, dtype)


def _rms_norm(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)).astype(x.dtype) * w.astype(x.dtype)


def rope_tables(spec: ModelSpec) -> tuple[jax.Array, jax.Array]:
    inv = 1.0 / spec.rope_theta ** (jnp.arange(0, spec.head_dim, 2, dtype=jnp.float32) / spec.head_dim)
    angles = jnp.outer(jnp.arange(spec.seq_len, dtype=jnp.float32), inv)  # (S, Dh/2)
    return jnp.cos(angles), jnp.sin(angles)


def _rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x (B, S, H, Dh): the same rotate-half layout as the torch model."""
    seq = x.shape[1]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    c, s = cos[None, :seq, None, :], sin[None, :seq, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)


def _attention(spec: ModelSpec, p: Params, prefix: str, x: jax.Array, rope: tuple, dtype: Any,
               fp8: str = "none") -> jax.Array:
    b, s, _ = x.shape
    h, hkv, dh = spec.n_heads, spec.n_kv_heads, spec.head_dim
    q = proj(x, p, prefix + "wq.weight", dtype, fp8).reshape(b, s, h, dh)  # (B, S, H, Dh): JAX's layout
    k = proj(x, p, prefix + "wk.weight", dtype, fp8).reshape(b, s, hkv, dh)
    v = proj(x, p, prefix + "wv.weight", dtype, fp8).reshape(b, s, hkv, dh)
    o = jax.nn.dot_product_attention(_rope(q, *rope), _rope(k, *rope), v, is_causal=True)
    return proj(o.reshape(b, s, h * dh), p, prefix + "wo.weight", dtype, fp8)


def _gathered_block(spec: ModelSpec, p: Params, *, i: int, x: jax.Array, rope: tuple, dtype: Any,
                    gather: Callable[[Params], Params],
                    moe_block: MoEBlock, fp8: str = "none") -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    return _block(spec, gather(p), i=i, x=x, rope=rope, dtype=dtype, moe_block=moe_block, fp8=fp8)


def _block(spec: ModelSpec, p: Params, *, i: int, x: jax.Array, rope: tuple, dtype: Any,
           moe_block: MoEBlock = moe, fp8: str = "none") -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """(x after the block, its MoE tokens per expert and load-balancing term; None, None for a dense block)."""
    pre = f"layers.{i}."
    x = x + _attention(spec, p, pre + "attention.", _rms_norm(x, p[pre + "attention_norm.weight"], spec.norm_eps),
                       rope, dtype, fp8)
    hn = _rms_norm(x, p[pre + "ffn_norm.weight"], spec.norm_eps)
    if spec.is_moe_layer(i):
        out, counts, aux = moe_block(spec, p, pre + "feed_forward.", hn, dtype, partial(proj, fp8=fp8))
        return x + out, counts, aux
    ff = pre + "feed_forward."
    gate = jax.nn.silu(proj(hn, p, ff + "w1.weight", dtype, fp8))
    up = proj(hn, p, ff + "w3.weight", dtype, fp8)
    return x + proj(gate * up, p, ff + "w2.weight", dtype, fp8), None, None


def _same(params: Params) -> Params:
    return params


def loss_and_routing(spec: ModelSpec, params: Params, tokens: jax.Array, targets: jax.Array, dtype: Any,
                     checkpointing: bool = False, gather: Callable[[Params], Params] = _same,
                     moe_block: MoEBlock = moe, fp8: str = "none") -> tuple[jax.Array, jax.Array | None]:
    """(loss, tokens per expert (MoE blocks, E) or None for a dense model). The loss is the mean next-token
    cross-entropy, plus aux_loss_coef x the MoE blocks' load-balancing terms, as Transformer.forward in
    torch_model.py. `gather` sees each group of parameters where it is used (the embedding, each block, the head):
    sharded parameters are gathered there (a sharding constraint), inside a block's recomputation under activation
    checkpointing. `moe_block` computes each MoE block (jax_ep.py's: its experts split over the devices). `fp8`: the
    recipe of the fp8 linear layers (fp8.py); none for a bf16 or fp32 step."""
    rope = rope_tables(spec)
    x = gather({"tok_embeddings.weight": params["tok_embeddings.weight"]})["tok_embeddings.weight"][tokens]  # (B, S, D)
    counts, aux = [], []
    for i in range(spec.n_layers):  # fp32 residual stream, as under torch autocast
        block = partial(_gathered_block, spec, i=i, rope=rope, dtype=dtype, gather=gather, moe_block=moe_block,
                        fp8=fp8)
        layer = {k: v for k, v in params.items() if k.startswith(f"layers.{i}.")}
        x, c, a = (jax.checkpoint(block) if checkpointing else block)(layer, x=x)
        if c is not None:
            counts.append(c)
            aux.append(a)
    head = gather({k: params[k] for k in ("norm.weight", "output.weight")})
    logits = _linear(_rms_norm(x, head["norm.weight"], spec.norm_eps), head["output.weight"], dtype)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # (B, S, V)
    loss = -jnp.mean(jnp.take_along_axis(logp, targets[..., None].astype(jnp.int32), axis=-1))
    if not counts:
        return loss, None
    return loss + spec.aux_loss_coef * sum(aux), jnp.stack(counts)


def loss_fn(spec: ModelSpec, params: Params, tokens: jax.Array, targets: jax.Array, dtype: Any,
            checkpointing: bool = False, gather: Callable[[Params], Params] = _same, fp8: str = "none") -> jax.Array:
    """The loss of `loss_and_routing` alone."""
    return loss_and_routing(spec, params, tokens, targets, dtype, checkpointing, gather, fp8=fp8)[0]


def global_norm(grads: Params) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in grads.values()))
