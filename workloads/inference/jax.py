"""Inference in JAX: the prefill and the decode step jit-compiled, the KV cache and token buffer donated (updated
in place), one compiled decode program for every position (the position is a traced argument)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import JAX_PEAK_SOURCE, local_jax_device
from xmfu.harness.machine.jax_distributed import jax_unavailable
from xmfu.workloads.inference.spec import InferenceSpec, decode_cycle


def available(case: InferenceSpec, ctx: RunContext) -> tuple[bool, str]:
    why = jax_unavailable(ctx.platform.kind)
    return (False, why) if why else (True, "")


class _Generation:
    """Weights, cache and token buffer on the device, the AOT-compiled prefill and decode step (compile time
    recorded, never timed), and the two operations; the cache and token buffer are donated to every call."""

    def __init__(self, case: InferenceSpec, device: Any) -> None:
        import jax
        import jax.numpy as jnp

        from xmfu.workloads.inference.jax_decoder import empty_cache

        self.case = case
        dtype = jnp.bfloat16 if case.dtype == "bf16" else jnp.float32
        # fp32 means fp32 (JAX's default matmul precision on GPUs is TF32)
        self.precision = "highest" if case.dtype == "fp32" else "default"
        self.params = {n: jax.device_put(jnp.asarray(w, dtype), device) for n, w in case.weights().items()}
        tokens = np.zeros((case.batch, case.cache_len + 1), np.int32)
        tokens[:, :case.prompt_len] = case.prompts()
        self.cache = jax.device_put(empty_cache(case.model, case.batch, case.cache_len, dtype), device)
        self.tokens = jax.device_put(tokens, device)
        self.positions = [jax.device_put(np.int32(p), device) for p in range(case.cache_len)]  # no transfer per step
        self._compile(dtype)

    def _compile(self, dtype: Any) -> None:
        import jax

        from xmfu.workloads.inference.jax_decoder import prefill_fn, step_fn

        self.compile_s = {}
        with jax.default_matmul_precision(self.precision):
            start = time.perf_counter()
            self._prefill = jax.jit(prefill_fn(self.case.model, self.case.prompt_len, dtype),
                                    donate_argnums=(1, 2)).lower(self.params, self.cache, self.tokens).compile()
            self.compile_s["compile_prefill_s"] = time.perf_counter() - start
            start = time.perf_counter()
            self._step = jax.jit(step_fn(self.case.model, dtype), donate_argnums=(1, 2)).lower(
                self.params, self.cache, self.tokens, self.positions[0]).compile()
            self.compile_s["compile_decode_s"] = time.perf_counter() - start

    def prefill(self) -> Any:
        self.cache, self.tokens, logits = self._prefill(self.params, self.cache, self.tokens)
        return logits

    def step(self, pos: int) -> Any:
        self.cache, self.tokens, logits = self._step(self.params, self.cache, self.tokens, self.positions[pos])
        return logits

    def check_pass(self) -> dict[str, np.ndarray]:
        """Prefill, then `check_steps` decode steps: sequence 0's logits (float64) and the tokens each picked."""
        p, steps = self.case.prompt_len, self.case.check_steps
        logits = [self.prefill()[0]] + [self.step(p + t)[0] for t in range(steps)]
        return {"logits": np.stack([np.asarray(x, np.float64) for x in logits]),
                "tokens": np.asarray(self.tokens)[0, p:p + steps + 1].copy()}


def prepare(case: InferenceSpec, ctx: RunContext) -> Prepared:
    # this process's own device, or the run's `device_index` (the device the row, peak and telemetry describe);
    # jax.devices() spans all processes
    device = local_jax_device(ctx.config.device_index)
    gen = _Generation(case, device)
    check = gen.check_pass()

    def peak_memory() -> int | None:
        stats = device.memory_stats() if hasattr(device, "memory_stats") else None
        return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None

    fn, advance = (gen.prefill, None) if case.phase == "prefill" else decode_cycle(case, gen.step)
    notes = {"library": "jax.jit, donated KV cache", **gen.compile_s, "matmul_precision": gen.precision,
             "weights_dtype": case.dtype, "kv_cache_dtype": case.dtype, "static_kv_cache": True,
             "decode_attention": "every cache slot, the unfilled ones masked (one program for every position)",
             "jax_device_kind": device.device_kind}
    return Prepared(fn, lambda rows: check, "jax", notes=notes, peak_memory=peak_memory,
                    peak_memory_source=JAX_PEAK_SOURCE, calls_per_sample=1, before_sample=advance)
