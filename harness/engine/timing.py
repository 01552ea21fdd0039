"""One timer interface, one implementation per framework, and the sampler that drives them.

Workloads never time anything: they hand the engine a zero-argument callable and the engine picks the
timer for the framework it runs on. A sample is the mean of `inner` back-to-back calls, with `inner`
chosen so one sample lasts at least `min_sample_s` (per-call events on very short kernels measure host
launch gaps, not the device).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.engine.settings import TimingConfig


class Timer(Protocol):
    name: str

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        """Seconds per call, averaged over `inner` back-to-back calls of `fn`."""
        ...


class HostTimer:
    """perf_counter around synchronous work (torch on CPU, the Triton interpreter)."""

    name = "perf_counter"

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - start) / inner


class TorchEventTimer:
    """CUDA/HIP events recorded on the current stream (torch.cuda covers both vendors)."""

    name = "torch.cuda.Event"

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        cuda = self._torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        cuda.synchronize()
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / inner


class JaxTimer:
    """perf_counter, waiting on the last output: JAX dispatch is asynchronous on every backend.

    Calls on one device execute in order, so blocking on the last output waits for all of them.
    """

    name = "perf_counter+block_until_ready"

    def __init__(self) -> None:
        import jax

        self._block = jax.block_until_ready

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        self._block(fn())  # drain anything queued before the window opens
        start = time.perf_counter()
        out = None
        for _ in range(inner):
            out = fn()
        self._block(out)
        return (time.perf_counter() - start) / inner


def timer_for(framework: str, platform_kind: str) -> Timer:
    if framework == "jax":
        return JaxTimer()
    if framework == "torch" and platform_kind in ("cuda", "rocm"):
        return TorchEventTimer()
    return HostTimer()


def rotate(calls: Sequence[Callable[[], Any]]) -> Callable[[], Any]:
    """One callable cycling through `calls`: input copies used in turn defeat the last-level cache."""
    if len(calls) == 1:
        return calls[0]
    state = {"i": 0}

    def call() -> Any:
        i = state["i"]
        state["i"] = (i + 1) % len(calls)
        return calls[i]()

    return call


def copies_for_cold_cache(cache_bytes: int | None, input_bytes: float, limit: int = 64) -> int:
    """Input copies whose total exceeds twice the last-level cache, so each call reads from memory."""
    if not cache_bytes or input_bytes <= 0:
        return 1
    return max(1, min(limit, math.ceil(2 * cache_bytes / input_bytes)))


@dataclass
class Series:
    """The samples of one (case, backend) while it is being measured."""

    backend: str
    fn: Callable[[], Any]
    timer: Timer
    inner: int = 1
    warmup_s: list[float] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    rounds: list[int] = field(default_factory=list)
    error: str | None = None  # set when this series failed while being measured
    fixed: Any = None  # a harness.case.FixedPlan: deterministic sampling
    intervals: list[tuple[float, float]] = field(default_factory=list)  # perf_counter span of each sample

    def take(self, round_no: int) -> None:
        """One sample, remembering when it ran (telemetry is matched to these spans)."""
        start = time.perf_counter()
        self.samples.append(self.timer.measure(self.fn, self.inner))
        self.intervals.append((start, time.perf_counter()))
        self.rounds.append(round_no)


def warm_up(series: Series, cfg: TimingConfig) -> None:
    """Run until `warmup_s` has passed and at least `warmup_min_iters` calls, then size `inner`."""
    start = time.perf_counter()
    while len(series.warmup_s) < cfg.warmup_min_iters or time.perf_counter() - start < cfg.warmup_s:
        series.warmup_s.append(series.timer.measure(series.fn, 1))
    single = min(series.warmup_s[-3:])
    series.inner = 1 if single <= 0 else max(1, min(cfg.max_inner, math.ceil(cfg.min_sample_s / single)))
