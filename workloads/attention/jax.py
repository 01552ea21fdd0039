"""jax.nn.dot_product_attention under jit: implementation `xla` (any device) or `cudnn` (NVIDIA GPUs).

JAX's layout is (B, S, H, D), sequence before heads; xmfu's is (B, H, S, D). Inputs are converted once, at
set-up, so the timed computation runs in JAX's native layout; results are converted back for checking.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import local_jax_device, to_jax, xla_cost_flops
from xmfu.harness.machine.jax_distributed import jax_unavailable
from xmfu.workloads.attention.reference import causal_mask
from xmfu.workloads.attention.spec import GRADS, AttentionCase


def to_jax_layout(x: np.ndarray) -> np.ndarray:
    """(B, H, S, D) -> (B, S, H, D)."""
    return np.ascontiguousarray(np.swapaxes(x, 1, 2))


def from_jax_layout(x: np.ndarray) -> np.ndarray:
    """(B, S, H, D) -> (B, H, S, D)."""
    return np.swapaxes(x, 1, 2)


def make_available(implementation: str) -> Callable[[AttentionCase, RunContext], tuple[bool, str]]:
    def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
        why = jax_unavailable(ctx.platform.kind)
        if why:
            return False, why
        if implementation == "cudnn" and ctx.platform.kind != "cuda":
            return False, f"implementation='cudnn' needs an NVIDIA GPU; this is a {ctx.platform.kind} device"
        if implementation == "cudnn" and case.dtype not in ("fp16", "bf16"):
            return False, "cuDNN attention through jax takes fp16 or bf16 only"
        if case.dtype == "tf32":
            return False, "tf32 attention is not offered through jax.nn.dot_product_attention"
        return True, ""

    return available


def _attend(case: AttentionCase, implementation: str) -> Callable:
    import jax
    import jax.numpy as jnp

    kwargs: dict[str, Any] = {"scale": case.scale, "implementation": implementation}
    if case.causal and case.causal_offset == 0:
        kwargs["is_causal"] = True  # JAX's is_causal keeps the top-left diagonal
    elif case.causal:  # bottom-right: an explicit (1, 1, Sq, Skv) mask, broadcast over batch and heads
        kwargs["mask"] = jnp.asarray(causal_mask(case.seq_q, case.seq_kv, case.causal_offset))[None, None]
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, **kwargs)


def _program(case: AttentionCase, attend: Callable, x: dict[str, Any]) -> tuple[Callable, Callable, dict]:
    """(timed call, result call, notes) for the case's mode, compiled ahead of timing."""
    import jax

    q, k, v, do = x["q"], x["k"], x["v"], x["do"]

    def fwd_bwd(q, k, v, do):
        out, vjp = jax.vjp(attend, q, k, v)
        return (out, *vjp(do))

    full = jax.jit(fwd_bwd)
    start = time.perf_counter()
    if case.mode == "fwd":
        compiled = jax.jit(attend).lower(q, k, v).compile()
        timed = lambda: compiled(q, k, v)  # noqa: E731
        results = lambda: (timed(),)  # noqa: E731
    elif case.mode == "bwd":
        _, vjp = jax.vjp(attend, q, k, v)  # forward done at set-up; only the pullback is timed
        compiled = jax.jit(vjp).lower(do).compile()
        timed = lambda: compiled(do)  # noqa: E731
        results = lambda: full(q, k, v, do)  # noqa: E731
    else:
        compiled = full.lower(q, k, v, do).compile()
        timed = lambda: compiled(q, k, v, do)  # noqa: E731
        results = timed
    notes = {"compile_s": time.perf_counter() - start, "xla_cost_flops": xla_cost_flops(compiled)}
    return timed, results, notes


def make_prepare(implementation: str) -> Callable[[AttentionCase, RunContext], Prepared]:
    def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
        device = local_jax_device(ctx.config.device_index)  # this process's (jax.devices() spans all processes)
        inputs = {n: to_jax_layout(a) for n, a in case.inputs().items()}
        x = {n: to_jax(a, case.dtype, device) for n, a in inputs.items()}
        try:
            timed, results, notes = _program(case, _attend(case, implementation), x)
        except ValueError as exc:  # e.g. XLA on a CPU has no fp16 dot with fp32 accumulation for the backward
            if "not supported" not in str(exc):
                raise
            raise Unavailable(f"XLA cannot compile this case on {ctx.platform.kind}: "
                              f"{str(exc).splitlines()[0][:200]}") from None

        def result(select: dict | None) -> dict[str, np.ndarray]:
            values = results()
            names = ["out"] if case.mode == "fwd" else ["out", *GRADS]
            picked = {}
            for name, value in zip(names, values, strict=False):
                host = from_jax_layout(np.asarray(value).astype(np.float64))
                index = (select or {}).get(name)
                picked[name] = host if index is None else host[index[0], index[1]]
            return picked

        notes.update({"library": f"jax.nn.dot_product_attention(implementation={implementation!r})",
                      "layout": "B,S,H,D (converted at set-up)", "jax_device_kind": device.device_kind})
        return Prepared(timed, result, "jax", notes=notes)

    return prepare
