"""xmfu's own Pallas GEMM (kernels/pallas_matmul.py) under jax.jit: the XLA regime's kernel language, as Triton
is torch's.

Lowering by platform (jax 0.10.2, jax/_src/pallas/pallas_call.py): on NVIDIA and AMD GPUs Triton, asked for
explicitly with jax.experimental.pallas.triton.CompilerParams (without compiler params the GPU rule picks Mosaic GPU
when `jax_pallas_use_mosaic_gpu` is set, and "Using pl.pallas_call for Mosaic GPU kernels is deprecated": a Mosaic
GPU GEMM is another kernel, plgpu.kernel, not offered here); Mosaic on TPUs; on a CPU "Only interpret mode is
supported", so the kernel runs with interpret=True: checked, its time not valid, like Triton's interpreter.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import jax_rows, local_jax_device, to_jax
from xmfu.harness.machine.jax_distributed import jax_unavailable
from xmfu.workloads.matmul.spec import MatmulCase

PALLAS_INTERPRETER_NOTE = ("Pallas interpret=True on a CPU: the result is checked, its time says nothing about "
                           "hardware")
OUT_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# (BLOCK_M, BLOCK_N, BLOCK_K) per lowering; not tuned on any device (performance not measured). GPUs: Triton's
# tutorial-03 tile for 16-bit inputs, a shallower K step for fp32 (twice the bytes per element); TPUs: the MXU's
# 128 granule (Pallas TPU matmul guide, "block sizes ... multiples of 128"); the interpreter: small steps.
BLOCKS = {"triton": {"fp32": (64, 64, 32), "other": (128, 128, 64)}, "mosaic": {"other": (128, 128, 128)},
          "interpret": {"other": (64, 64, 64)}}
# 8 warps: the 128x128x64 tile's fp32 accumulator on 4 warps (128 registers a thread) spilled 116-268 bytes on sm80,
# sm90 and sm100 (`xmfu kernels`, Triton 3.9); on 8 it is 64, as the persistent GEMM's 128x128x64 w8 compiles clean.
TRITON_LAUNCH = {"num_warps": 8, "num_stages": 3}


def lowering(kind: str) -> str:
    """How pallas_call runs on a platform kind: triton (GPUs), mosaic (TPUs), interpret (a CPU)."""
    return {"cuda": "triton", "rocm": "triton", "tpu": "mosaic"}.get(kind, "interpret")


def blocks(kind: str, dtype: str) -> tuple[int, int, int]:
    table = BLOCKS[lowering(kind)]
    return table.get(dtype, table["other"])


def pallas_unavailable(kind: str) -> str | None:
    """Why Pallas cannot run here, or None: jax must import (and run on this device), and on GPUs its Triton
    lowering (jax.experimental.pallas.triton) must be present."""
    why = jax_unavailable(kind)
    if why:
        return why
    try:
        import jax.experimental.pallas
        if lowering(kind) == "triton":
            import jax.experimental.pallas.triton  # noqa: F401
    except ImportError as exc:
        return f"jax.experimental.pallas does not import here: {exc}"
    return None


def available(case: MatmulCase, ctx: RunContext) -> tuple[bool, str]:
    why = pallas_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if case.dtype not in OUT_DTYPE:
        return False, f"{case.dtype} is not offered by xmfu's Pallas GEMM (fp32, bf16, fp16)"
    if case.dtype == "fp16" and ctx.platform.kind == "tpu":
        return False, "TPUs have no fp16 matrix unit; use bf16"
    return True, ""


# Pallas' interpreter here: 1024^3 in about half a second, 2048^3 in about 14 s (measured on this 2-core machine,
# jax 0.10.2, 64/128 blocks). Above this many multiply-adds a smaller case, off the block multiples, checks the same
# kernel and the row says so.
INTERPRETER_LIMIT = 1024**3


def interpreter_case(case: MatmulCase) -> MatmulCase:
    if case.m * case.n * case.k <= INTERPRETER_LIMIT:
        return case
    return replace(case, m=min(case.m, 200), n=min(case.n, 136), k=min(case.k, 152))


def _padded(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    return np.pad(x, ((0, rows - x.shape[0]), (0, cols - x.shape[1])))


def _up(n: int, block: int) -> int:
    return -(-n // block) * block


def _prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    import jax
    import jax.numpy as jnp

    from xmfu.kernels.pallas_matmul import matmul

    kind = ctx.platform.kind
    how, (bm, bn, bk) = lowering(kind), blocks(kind, case.dtype)
    m, n, k = _up(case.m, bm), _up(case.n, bn), _up(case.k, bk)
    a_np, b_np = case.stored_inputs()
    # Zero padding to the block multiples, at set-up (untimed): exact for a matmul; the timed call computes the
    # padded C and the check reads its top-left case.m x case.n.
    a_np = _padded(a_np, k, m) if case.transpose_a else _padded(a_np, m, k)
    b_np = _padded(b_np, n, k) if case.transpose_b else _padded(b_np, k, n)
    device = local_jax_device(ctx.config.device_index)
    a, b = (to_jax(x, case.dtype, device) for x in (a_np, b_np))
    params = None
    if how == "triton":
        from jax.experimental.pallas import triton as pltriton
        params = pltriton.CompilerParams(**TRITON_LAUNCH)
    # fp32 at HIGHEST: the Triton lowering takes DEFAULT (and HIGH) as TF32 (lowering.py, _TF32_PRECISIONS).
    precision = jax.lax.Precision.HIGHEST if case.dtype == "fp32" else None
    call = jax.jit(lambda a, b: matmul(
        a, b, block_m=bm, block_n=bn, block_k=bk, out_dtype=getattr(jnp, OUT_DTYPE[case.dtype]),
        transpose_a=case.transpose_a, transpose_b=case.transpose_b, precision=precision,
        interpret=how == "interpret", compiler_params=params))
    start = time.perf_counter()
    compiled = call.lower(a, b).compile()
    compile_s = time.perf_counter() - start

    def result(rows: np.ndarray | None) -> np.ndarray:
        return jax_rows(compiled(a, b)[:case.m, :case.n], rows)

    notes: dict[str, Any] = {
        "library": "xmfu.kernels.pallas_matmul (jax.experimental.pallas)", "jax": jax.__version__,
        "jaxlib": jaxlib_version(), "lowering": how, "blocks": f"{bm}x{bn}x{bk}", "compile_s": compile_s,
        "precision": "HIGHEST (ieee)" if precision is not None else "default, fp32 accumulation",
        "padded_to": f"{m}x{n}x{k}" if (m, n, k) != (case.m, case.n, case.k) else "none",
        "jax_device_kind": device.device_kind}
    if how == "triton":
        notes["triton_launch"] = dict(TRITON_LAUNCH)
    on_cpu = how == "interpret"
    return Prepared(lambda: compiled(a, b), result, "jax", timing_valid=not on_cpu,
                    timing_note=PALLAS_INTERPRETER_NOTE if on_cpu else "", notes=notes)


def jaxlib_version() -> str:
    import jaxlib

    return getattr(jaxlib, "__version__", "unknown")


def prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    why = pallas_unavailable(ctx.platform.kind)
    if why:
        raise Unavailable(why)
    checked = interpreter_case(case) if lowering(ctx.platform.kind) == "interpret" else case
    prepared = _prepare(checked, ctx)
    if checked is not case:
        prepared.check_case = checked
        prepared.timing_note += (f"; checked at {checked.m}x{checked.n}x{checked.k} (the interpreter would take "
                                 f"minutes at {case.m}x{case.n}x{case.k})")
    return prepared
