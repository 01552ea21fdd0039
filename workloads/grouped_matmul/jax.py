"""jax.lax.ragged_dot under jax.jit: XLA's grouped GEMM (its ragged-dot lowering on the device)."""

from __future__ import annotations

import time

import numpy as np

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import jax_rows, local_jax_device, to_jax, xla_cost_flops
from xmfu.harness.machine.jax_distributed import jax_unavailable
from xmfu.workloads.grouped_matmul.spec import GroupedMatmulCase


def available(case: GroupedMatmulCase, ctx: RunContext) -> tuple[bool, str]:
    why = jax_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if case.dtype == "fp16" and ctx.platform.kind == "tpu":
        return False, "TPUs have no fp16 matrix unit; use bf16"
    return True, ""


def prepare(case: GroupedMatmulCase, ctx: RunContext) -> Prepared:
    import jax
    import jax.numpy as jnp

    device = local_jax_device(ctx.config.device_index)
    host = case.inputs()
    a, b = (to_jax(host[n], case.dtype, device) for n in ("a", "b"))
    sizes = jax.device_put(host["group_sizes"], device)
    # fp32 pinned to full precision (JAX's default on GPUs is TF32); other dtypes accumulate in fp32 and round the
    # result to the input dtype, as torch's grouped GEMM does.
    precision = jax.lax.Precision.HIGHEST if case.dtype == "fp32" else None

    def ragged(a, b, sizes):
        out = jax.lax.ragged_dot(a, b, sizes, precision=precision, preferred_element_type=jnp.float32)
        return out.astype(a.dtype)

    start = time.perf_counter()
    compiled = jax.jit(ragged).lower(a, b, sizes).compile()
    compile_s = time.perf_counter() - start

    def call():
        return compiled(a, b, sizes)

    def result(rows: np.ndarray | None) -> np.ndarray:
        return jax_rows(call(), rows)

    notes = {"library": "jax.lax.ragged_dot (XLA)", "precision": str(precision), "compile_s": compile_s,
             "xla_cost_flops": xla_cost_flops(compiled), "jax_device_kind": device.device_kind}
    return Prepared(call, result, "jax", notes=notes, output=jax_rows)
