"""The STREAM kernels under jax.jit: one XLA fusion each. JAX arrays are immutable, so each call writes a new output
buffer (XLA's allocator hands back the last one freed, as a preallocated output would be)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import jax_rows, local_jax_device, to_jax
from xmfu.harness.machine.jax_distributed import jax_unavailable
from xmfu.workloads.membw.spec import INPUTS, SCALAR, MembwCase


def available(case: MembwCase, ctx: RunContext) -> tuple[bool, str]:
    why = jax_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if case.dtype == "fp16" and ctx.platform.kind == "tpu":
        return False, "TPUs have no fp16 arithmetic; use bf16"
    return True, ""


def _kernel(kernel: str) -> Any:
    import jax.numpy as jnp

    # copy: jnp.copy, which XLA keeps (an output may not alias a parameter that was not donated)
    return {"copy": lambda x: jnp.copy(x), "scale": lambda x: SCALAR * x, "add": lambda x, y: x + y,
            "triad": lambda x, y: x + SCALAR * y}[kernel]


def prepare(case: MembwCase, ctx: RunContext) -> Prepared:
    import jax

    device = local_jax_device(ctx.config.device_index)
    names = INPUTS[case.kernel]
    host = case.inputs()
    first = [to_jax(host[n], case.dtype, device) for n in names]
    sets = [first] + [[a.copy() for a in first] for _ in range(ctx.input_copies(case.input_bytes()) - 1)]
    start = time.perf_counter()
    compiled = jax.jit(_kernel(case.kernel)).lower(*first).compile()
    compile_s = time.perf_counter() - start
    calls = [(lambda args=args: compiled(*args)) for args in sets]

    def result(rows: np.ndarray | None) -> np.ndarray:
        return jax_rows(compiled(*sets[0]), rows)

    def fresh_inputs(new: MembwCase) -> None:  # timing.fresh_inputs: new arrays in the first set's places
        values = new.inputs()
        sets[0][:] = [to_jax(values[n], case.dtype, device) for n in names]
        jax.block_until_ready(sets[0])  # in place before the timed call (its timer is perf_counter)

    notes = {"library": "jax.jit (XLA fusion)", "compile_s": compile_s, "jax_device": str(device),
             "input_copies": len(calls), **case.notes(ctx.device.cache_bytes)}
    return Prepared(rotate(calls), result, "jax", notes=notes, fresh_inputs=fresh_inputs, output=jax_rows)
