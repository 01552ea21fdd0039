"""jnp.dot under jax.jit: XLA's GEMM (cuBLAS/hipBLASLt on GPUs, the MXU on TPUs, Eigen/oneDNN on a CPU)."""

from __future__ import annotations

import time

import numpy as np

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import jax_rows, jax_unavailable, local_jax_device, to_jax, xla_cost_flops
from xmfu.workloads.matmul.spec import MatmulCase


def available(case: MatmulCase, ctx: RunContext) -> tuple[bool, str]:
    why = jax_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if case.dtype == "tf32" and ctx.platform.kind not in ("cuda", "rocm"):
        return False, f"tf32 needs GPU tensor cores; a {ctx.platform.kind} device has none"
    if case.dtype == "fp8":
        return False, "fp8 through jax is not implemented in xmfu's matmul yet"
    if case.dtype == "fp16" and ctx.platform.kind == "tpu":
        return False, "TPUs have no fp16 matrix unit; use bf16"
    return True, ""


def _dot(case: MatmulCase):
    import jax
    import jax.numpy as jnp

    # fp32 pinned to full precision (JAX's default on GPU is TF32 and on TPU bf16 passes); tf32 asked for
    # explicitly; bf16/fp16 accumulate in fp32 and round the result to the input dtype, like torch.matmul.
    out_dtype = jnp.bfloat16 if case.dtype == "bf16" else jnp.float16 if case.dtype == "fp16" else jnp.float32
    if case.dtype == "fp32":
        kwargs = {"precision": jax.lax.Precision.HIGHEST}
    elif case.dtype == "tf32":
        kwargs = {"precision": jax.lax.DotAlgorithmPreset.TF32_TF32_F32}
    else:
        kwargs = {"preferred_element_type": jnp.float32}

    def dot(a, b):
        a = a.T if case.transpose_a else a
        b = b.T if case.transpose_b else b
        return jnp.dot(a, b, **kwargs).astype(out_dtype)

    return dot, str(kwargs)


def prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    import jax

    device = local_jax_device(ctx.config.device_index)  # this process's (jax.devices() spans all processes)
    a_np, b_np = case.stored_inputs()
    copies = ctx.input_copies(case.input_bytes())
    a0, b0 = to_jax(a_np, case.dtype, device), to_jax(b_np, case.dtype, device)
    pairs = [(a0, b0)] + [(a0.copy(), b0.copy()) for _ in range(copies - 1)]
    dot, precision = _dot(case)
    start = time.perf_counter()
    compiled = jax.jit(dot).lower(a0, b0).compile()
    compile_s = time.perf_counter() - start
    calls = [(lambda a=a, b=b: compiled(a, b)) for a, b in pairs]

    def result(rows: np.ndarray | None) -> np.ndarray:
        return jax_rows(compiled(a0, b0), rows)

    notes = {"library": "jnp.dot (XLA)", "precision": precision, "compile_s": compile_s,
             "xla_cost_flops": xla_cost_flops(compiled),
             "jax_device": str(device), "jax_device_kind": device.device_kind, "input_copies": len(calls)}
    return Prepared(rotate(calls), result, "jax", notes=notes)
