"""The Pallas GEMM (kernels/pallas_matmul.py) through Pallas' Triton lowering, on a CPU: jax lowers the pallas_call
for the "cuda" or "rocm" platform without a GPU (`jit(...).trace(...).lower(lowering_platforms=...)`; jax 0.10.2
pallas/triton/pallas_call_registration.py falls back to compute capability 9.0 when no GPU is there), and the
Triton module it makes (TTIR, captured from lower_jaxpr_to_triton_module) is compiled by the installed Triton.

On a GPU, XLA compiles that module with the Triton it is built with, not this one: what is reported here is what
the installed Triton makes of Pallas' TTIR, with the block sizes and launch options workloads/matmul/jax_pallas.py
passes.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from xmfu.harness.kernelcheck.catalog import GEMM, Entry, Job, label
from xmfu.harness.kernelcheck.targets import Target

JAX_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def lowered_ttir(dtype: str, target: Target) -> str:
    """The TTIR Pallas' Triton lowering makes of the GEMM for `target`'s platform."""
    import jax
    import jax.numpy as jnp
    from jax._src.pallas.triton import pallas_call_registration as registration
    from jax.experimental.pallas import triton as pltriton

    from xmfu.kernels.pallas_matmul import matmul
    from xmfu.workloads.matmul.jax_pallas import TRITON_LAUNCH, blocks

    bm, bn, bk = blocks("cuda", dtype)
    lower = registration.lowering.lower_jaxpr_to_triton_module
    modules: list[str] = []

    def capture(*args: Any, **kwargs: Any) -> Any:
        result = lower(*args, **kwargs)
        modules.append(result.module.operation.get_asm(enable_debug_info=False))
        return result

    operand = jax.ShapeDtypeStruct((GEMM, GEMM), getattr(jnp, JAX_DTYPES[dtype]))
    precision = jax.lax.Precision.HIGHEST if dtype == "fp32" else None  # as jax_pallas.py: fp32 at ieee
    registration.lowering.lower_jaxpr_to_triton_module = capture
    try:
        jax.jit(lambda a, b: matmul(a, b, block_m=bm, block_n=bn, block_k=bk, out_dtype=operand.dtype,
                                    precision=precision, compiler_params=pltriton.CompilerParams(**TRITON_LAUNCH))
                ).trace(operand, operand).lower(lowering_platforms=("cuda" if target.nvidia else "rocm",))
    finally:
        registration.lowering.lower_jaxpr_to_triton_module = lower
    if len(modules) != 1:
        raise RuntimeError(f"Pallas' Triton lowering made {len(modules)} modules, not 1")
    return modules[0]


def unreachable() -> str:
    """Why Pallas' Triton lowering cannot be reached here, or "": jax with jax.experimental.pallas.triton."""
    try:
        import jax.experimental.pallas.triton  # noqa: F401
        from jax._src.pallas.triton import pallas_call_registration  # noqa: F401
    except ImportError as exc:
        return f"Pallas' Triton lowering is not reachable here: {exc}"
    return ""


def jobs(entry: Entry, dtype: str, target: Target) -> list[Any]:
    from xmfu.workloads.matmul.jax_pallas import TRITON_LAUNCH, blocks

    bm, bn, bk = blocks("cuda", dtype)
    params = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "warps": TRITON_LAUNCH["num_warps"],
              "stages": TRITON_LAUNCH["num_stages"]}

    def compile_ttir() -> Any:
        import triton

        with tempfile.NamedTemporaryFile("w", suffix=".ttir", dir=os.environ.get("TRITON_HOME"),
                                         delete=False) as f:
            f.write(lowered_ttir(dtype, target))
        try:
            return triton.compile(f.name, target=target.gpu_target(), options=dict(TRITON_LAUNCH))
        finally:
            os.unlink(f.name)

    return [Job(entry.name, "xmfu_pallas_matmul", label(params), 0, dtype, target.name, compile_ttir, params,
                unreachable())]
