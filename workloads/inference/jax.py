"""Inference in JAX: the prefill and the decode step jit-compiled, the KV cache and token buffer donated (updated
in place), one compiled decode program for every position (the position is a traced argument)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from harness.engine.case import Prepared
from harness.engine.context import RunContext
from harness.machine.frameworks import jax_unavailable, local_jax_device
from workloads.inference.spec import InferenceSpec


def available(case: InferenceSpec, ctx: RunContext) -> tuple[bool, str]:
    why = jax_unavailable(ctx.platform.kind)
    return (False, why) if why else (True, "")


def _compiled(case: InferenceSpec, params: dict, state: dict, positions: list, dtype: Any,
              precision: str) -> tuple[Any, Any, dict[str, float]]:
    """AOT-compiled prefill and decode step (compile time recorded, never timed)."""
    import jax

    from workloads.inference.jax_decoder import prefill_fn, step_fn

    times = {}
    with jax.default_matmul_precision(precision):
        start = time.perf_counter()
        prefill = jax.jit(prefill_fn(case.model, case.prompt_len, dtype), donate_argnums=(1, 2)).lower(
            params, state["cache"], state["tokens"]).compile()
        times["compile_prefill_s"] = time.perf_counter() - start
        start = time.perf_counter()
        step = jax.jit(step_fn(case.model, dtype), donate_argnums=(1, 2)).lower(
            params, state["cache"], state["tokens"], positions[0]).compile()
        times["compile_decode_s"] = time.perf_counter() - start
    return prefill, step, times


def prepare(case: InferenceSpec, ctx: RunContext) -> Prepared:
    import jax
    import jax.numpy as jnp

    from workloads.inference.jax_decoder import empty_cache

    device = local_jax_device()  # this process's own device (jax.devices() spans all processes)
    dtype = jnp.bfloat16 if case.dtype == "bf16" else jnp.float32
    precision = "highest" if case.dtype == "fp32" else "default"  # fp32 means fp32 (JAX's GPU default is TF32)
    params = {n: jax.device_put(jnp.asarray(w, dtype), device) for n, w in case.weights().items()}
    tokens = np.zeros((case.batch, case.cache_len + 1), np.int32)
    tokens[:, :case.prompt_len] = case.prompts()
    state = {"cache": jax.device_put(empty_cache(case.model, case.batch, case.cache_len, dtype), device),
             "tokens": jax.device_put(tokens, device)}
    positions = [jax.device_put(np.int32(p), device) for p in range(case.cache_len)]  # no transfer per step
    prefill, step, compile_s = _compiled(case, params, state, positions, dtype, precision)

    def run_prefill() -> Any:
        state["cache"], state["tokens"], logits = prefill(params, state["cache"], state["tokens"])
        return logits

    def run_step(pos: int) -> Any:
        state["cache"], state["tokens"], logits = step(params, state["cache"], state["tokens"], positions[pos])
        return logits

    p, steps = case.prompt_len, case.check_steps  # the correctness pass: prefill, then `steps` decode steps
    logits = [run_prefill()[0]] + [run_step(p + t)[0] for t in range(steps)]
    check = {"logits": np.stack([np.asarray(x, np.float64) for x in logits]),
             "tokens": np.asarray(state["tokens"])[0, p:p + steps + 1].copy()}
    cursor = {"pos": p + case.gen_len - 1}  # the first sample's hook moves it to P (see spec.py)

    def advance() -> None:
        cursor["pos"] = p + (cursor["pos"] - p + 1) % case.gen_len

    def peak_memory() -> int | None:
        stats = device.memory_stats() if hasattr(device, "memory_stats") else None
        return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None

    fn = run_prefill if case.phase == "prefill" else (lambda: run_step(cursor["pos"]))
    notes = {"library": "jax.jit, donated KV cache", **compile_s, "matmul_precision": precision,
             "weights_dtype": case.dtype, "kv_cache_dtype": case.dtype, "static_kv_cache": True,
             "decode_attention": "every cache slot, the unfilled ones masked (one program for every position)",
             "jax_device_kind": device.device_kind}
    return Prepared(fn, lambda rows: check, "jax", notes=notes, peak_memory=peak_memory, calls_per_sample=1,
                    before_sample=advance if case.phase == "decode" else None)
