"""A tiled Pallas GEMM, C = A @ B, fp32 accumulation: one program per (BLOCK_M, BLOCK_N) tile of C, looping over K.

It follows the matmul of the Pallas documentation (docs.jax.dev/en/latest/pallas/quickstart.html, "Grids and
BlockSpecs": a 2-D grid over C's tiles, BlockSpecs that hand each program a row panel of A and a column panel of
B) with the K loop of the Pallas TPU matmul guide (docs.jax.dev/en/latest/pallas/tpu/matmul.html: blocks of
BLOCK_K accumulated in fp32, cast once at the end) written as a `fori_loop` inside the kernel, as jax's own GPU
attention kernel (jax/experimental/pallas/ops/gpu/attention.py, jax 0.10.2) loops over K/V, so that the same kernel
lowers through Triton (GPUs), Mosaic (TPUs) and the interpreter (a CPU).

Shapes must be multiples of the blocks: the caller pads with zeros (exact for a matmul: zero rows of K add nothing,
the extra rows and columns of C are not read). Transposed storage is taken as it is stored: the kernel contracts
over the stored dimension (lax.dot_general), as the Triton lowering's dot does with a `tt.trans`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl


def _kernel(a_ref: Any, b_ref: Any, o_ref: Any, *, block_k: int, k: int, transpose_a: bool, transpose_b: bool,
            precision: Any) -> None:
    # a_ref: (BLOCK_M, K) or, stored transposed, (K, BLOCK_M); b_ref: (K, BLOCK_N) or (BLOCK_N, K).
    block_m, block_n = o_ref.shape
    a_contract, b_contract = (0 if transpose_a else 1), (1 if transpose_b else 0)

    def body(step: Any, acc: Any) -> Any:
        ks = pl.ds(step * block_k, block_k)
        a = a_ref[ks, :] if transpose_a else a_ref[:, ks]
        b = b_ref[:, ks] if transpose_b else b_ref[ks, :]
        # preferred_element_type=fp32: Pallas' Triton lowering accumulates in the dot's output type
        # (jax/_src/pallas/triton/lowering.py, _dot_general_lowering: acc_dtype = out_aval.dtype), so without it an
        # fp16 product would accumulate in fp16.
        return acc + lax.dot_general(a, b, (((a_contract,), (b_contract,)), ((), ())), precision=precision,
                                     preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, k // block_k, body, jnp.zeros((block_m, block_n), jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def matmul(a: Any, b: Any, *, block_m: int, block_n: int, block_k: int, out_dtype: Any, transpose_a: bool = False,
           transpose_b: bool = False, precision: Any = None, interpret: bool = False,
           compiler_params: Any = None) -> Any:
    """A @ B (A stored (K, M) when transpose_a, B stored (N, K) when transpose_b); every dimension a multiple of its
    block. `compiler_params` picks the lowering on a GPU (jax.experimental.pallas.triton.CompilerParams: Triton)."""
    m = a.shape[1] if transpose_a else a.shape[0]
    k = a.shape[0] if transpose_a else a.shape[1]
    n = b.shape[0] if transpose_b else b.shape[1]
    if m % block_m or n % block_n or k % block_k:
        raise ValueError(f"{m}x{n}x{k} is not a multiple of the blocks {block_m}x{block_n}x{block_k}: pad it")
    a_spec = (pl.BlockSpec((k, block_m), lambda i, j: (0, i)) if transpose_a
              else pl.BlockSpec((block_m, k), lambda i, j: (i, 0)))
    b_spec = (pl.BlockSpec((block_n, k), lambda i, j: (j, 0)) if transpose_b
              else pl.BlockSpec((k, block_n), lambda i, j: (0, j)))
    kernel = functools.partial(_kernel, block_k=block_k, k=k, transpose_a=transpose_a, transpose_b=transpose_b,
                               precision=precision)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
        grid=(m // block_m, n // block_n),
        in_specs=[a_spec, b_spec],
        out_specs=pl.BlockSpec((block_m, block_n), lambda i, j: (i, j)),
        compiler_params=compiler_params,
        interpret=interpret,
        name="xmfu_pallas_matmul",
    )(a, b)
