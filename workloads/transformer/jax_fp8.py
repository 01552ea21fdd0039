"""An fp8 linear layer in JAX: `jax.lax.dot_general` on float8 operands with dynamic scales, forward and backward,
under torchao's recipes (fp8.py) so that the JAX and torch fp8 steps compute the same thing.

Each GEMM scales its two operands into the fp8 range (scale = fp8 max / amax, torchao/float8/float8_utils.py
`amax_to_scale`), casts them (values beyond the range clipped, as torchao's `to_fp8_saturated`), multiplies them with
`dot_general` accumulating in fp32 (`preferred_element_type`), and divides the product by both scales:
- tensorwise: one scale per operand; input and weight float8_e4m3fn, the output gradient float8_e5m2;
- rowwise: one scale per row along the dimension the GEMM reduces over, every operand float8_e4m3fn, scales
  rounded down to a power of 2 (torchao's `round_scales_to_power_of_2`).
The backward is written out (`jax.custom_vjp`): the input gradient dY·W and the weight gradient dYᵀ·X are fp8 GEMMs
too, their operands scaled along their own reduction dimension, as torchao's Float8Linear does.

What XLA makes of it depends on the device. On the CPU (jax 0.10.2, read from the compiled HLO) it converts both
fp8 operands to f32 before an f32 dot: the fp8 rounding is kept, the arithmetic is f32. On a GPU with fp8 tensor
cores XLA's GEMM rewriter is meant to lower an fp8 dot_general to an fp8 cuBLASLt GEMM (not yet seen on a GPU here:
none was available to the session that built this), so the row's notes (`fp8.gemm`) count the `__cublas$lt$matmul$f8`
custom calls in the compiled step's HLO, and say so where there are none.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
EPS = 1e-12  # torchao's floor under amax (float8_utils.py EPS), so an all-zero operand scales finitely


def _quantize(a: jax.Array, fmt: Any, axis: int | None, pow2: bool) -> tuple[jax.Array, jax.Array]:
    """(a scaled and cast to `fmt`, 1/scale broadcastable against a); `axis`: the reduction dimension (rowwise),
    None: the whole tensor (tensorwise)."""
    top = float(jnp.finfo(fmt).max)
    amax = jnp.max(jnp.abs(a.astype(jnp.float32)), axis=axis, keepdims=axis is not None)
    scale = top / jnp.maximum(amax, EPS)
    if pow2:
        scale = jnp.exp2(jnp.floor(jnp.log2(scale)))
    return jnp.clip(a.astype(jnp.float32) * scale, -top, top).astype(fmt), 1.0 / scale


def _gemm(a: jax.Array, b: jax.Array, contract: tuple[int, int], fmts: tuple[Any, Any], rowwise: bool) -> jax.Array:
    """a (M, K) or (K, M) times b along `contract` = (a's reduction axis, b's), in fp8: (M, N) fp32."""
    ca, cb = contract
    a8, a_inv = _quantize(a, fmts[0], ca if rowwise else None, rowwise)
    b8, b_inv = _quantize(b, fmts[1], cb if rowwise else None, rowwise)
    out = jax.lax.dot_general(a8, b8, (((ca,), (cb,)), ((), ())), preferred_element_type=jnp.float32)
    return out * a_inv.reshape(-1, 1) * b_inv.reshape(1, -1) if rowwise else out * a_inv * b_inv


def _formats(recipe: str) -> tuple[Any, Any]:
    """(forward operands' format, output gradient's format)."""
    return (E4M3, E5M2) if recipe == "tensorwise" else (E4M3, E4M3)


@partial(jax.custom_vjp, nondiff_argnums=(2,))
def _fp8_matmul(x: jax.Array, w: jax.Array, recipe: str) -> jax.Array:
    """x (T, in) @ w (out, in)ᵀ -> (T, out) fp32, every GEMM of it in fp8."""
    fwd, _ = _formats(recipe)
    return _gemm(x, w, (1, 1), (fwd, fwd), recipe == "rowwise")


def _forward(x: jax.Array, w: jax.Array, recipe: str) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return _fp8_matmul(x, w, recipe), (x, w)


def _backward(recipe: str, saved: tuple[jax.Array, jax.Array], g: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, w = saved
    fwd, grad = _formats(recipe)
    rowwise = recipe == "rowwise"
    dx = _gemm(g, w, (1, 0), (grad, fwd), rowwise)  # (T, out) · (out, in): reduces over out
    dw = _gemm(g, x, (0, 0), (grad, fwd), rowwise)  # (T, out)ᵀ · (T, in): reduces over the tokens
    return dx.astype(x.dtype), dw.astype(w.dtype)


_fp8_matmul.defvjp(_forward, _backward)


def fp8_linear(x: jax.Array, w: jax.Array, dtype: Any, recipe: str) -> jax.Array:
    """x (..., in) @ w (out, in)ᵀ with fp8 GEMMs, the output in `dtype` (bf16), as torchao's Float8Linear under
    autocast: its operands are the bf16 activations and the bf16-cast weight."""
    flat = x.astype(dtype).reshape(-1, x.shape[-1])
    out = _fp8_matmul(flat, w.astype(dtype), recipe)
    return out.astype(dtype).reshape(*x.shape[:-1], w.shape[0])


F8_GEMM = "__cublas$lt$matmul$f8"  # XLA's custom-call target for an fp8 cuBLASLt GEMM (xla/service/gpu/cublas_cudnn.cc)


def gemm_note(platform_kind: str, compiled_hlo: str) -> str:
    """What the fp8 dot_generals ran as in the compiled step, read from its HLO, for the row's notes."""
    if platform_kind == "cpu":
        return ("jax.lax.dot_general on float8 operands; XLA:CPU converts them to f32 before the dot (fp8 rounding, "
                "f32 arithmetic)")
    found = compiled_hlo.count(F8_GEMM)
    if found:
        return f"jax.lax.dot_general on float8 operands: {found} fp8 GEMMs ({F8_GEMM}) in the compiled step"
    return (f"jax.lax.dot_general on float8 operands, but no {F8_GEMM} in the compiled step: XLA ran them as other "
            "GEMMs, so the fp8 FLOPs did not run on fp8 units")
