"""The samples of one (case, backend) as they are taken, its warm-up, and input rotation for cold caches.

A sample is the mean of `inner` back-to-back calls, with `inner` chosen so one sample lasts at least
`min_sample_s` (per-call events on very short kernels measure host launch gaps, not the device).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xmfu.harness.engine import stall
from xmfu.harness.engine.settings import TimingConfig
from xmfu.harness.engine.timers import Timer


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
    host_samples: list[float] = field(default_factory=list)  # host time to issue each sample's calls, per call
    inner_note: str | None = None  # why `inner` is below what min_sample_s asked for (the time budget)
    repeat: int = 0  # which repeat of the measurement (repeats=N) this series is
    sample_repeats: list[int] = field(default_factory=list)  # the repeat of each sample (merged series)
    inners: list[int] = field(default_factory=list)  # `inner` of each repeat (merged series)
    calls_per_sample: int | None = None  # fixed `inner` (Prepared.calls_per_sample); None: sized by min_sample_s
    before_sample: Callable[[], Any] | None = None  # run before every sample, outside the timed region
    last_output: Any = None  # what the last timed call returned, until engine/recheck.py has re-checked it
    keep_output: bool = False  # whether to keep it (a backend that can read it back: Prepared.output); else the
    # timer's reference is dropped after each sample, so no output outlives the sample that made it

    def take(self, round_no: int) -> None:
        """One sample, remembering when it ran (telemetry is matched to these spans)."""
        if self.before_sample is not None:
            self.before_sample()
        start = time.perf_counter()
        self.samples.append(self.timer.measure(self.fn, self.inner))
        self.intervals.append((start, time.perf_counter()))
        if hasattr(self.timer, "last_output"):
            self.last_output = self.timer.last_output if self.keep_output else None
            self.timer.last_output = None
        stall.kick()
        self.rounds.append(round_no)
        self.sample_repeats.append(self.repeat)
        if self.timer.last_host_s is not None:
            self.host_samples.append(self.timer.last_host_s)


def warm_up(series: Series, cfg: TimingConfig) -> None:
    """Run until `warmup_s` has passed and at least `warmup_min_iters` calls, then size `inner` (unless the
    backend fixed it)."""
    start = time.perf_counter()
    while len(series.warmup_s) < cfg.warmup_min_iters or time.perf_counter() - start < cfg.warmup_s:
        series.warmup_s.append(series.timer.measure(series.fn, 1))
        stall.kick()
    if series.calls_per_sample:
        series.inner = series.calls_per_sample
        series.inner_note = (f"{series.inner} call(s) per sample, fixed by the backend so that samples are "
                             "per-event latencies (timing.min_sample_s not applied)")
        return
    single = min(series.warmup_s[-3:])
    # A flushing timer's calls each cost their flush too, outside the timed region: a sample lasts min_sample_s
    # with the flushes counted, or a 64 MiB host flush before each of 100 tiny calls makes one sample last a second
    single = max(single, getattr(series.timer, "last_wall_s", None) or 0.0)
    series.inner = 1 if single <= 0 else max(1, min(cfg.max_inner, math.ceil(cfg.min_sample_s / single)))


def merged_series(parts: list[Series]) -> Series:
    """The series of several repeats as one: samples, rounds, spans and host times concatenated, each sample
    keeping its repeat; the warm-up, timer and plan are the first repeat's."""
    first = parts[0]
    out = Series(first.backend, first.fn, first.timer, inner=first.inner, warmup_s=list(first.warmup_s),
                 fixed=first.fixed, repeat=-1)
    for part in parts:
        out.samples += part.samples
        out.rounds += part.rounds
        out.intervals += part.intervals
        out.host_samples += part.host_samples
        out.sample_repeats += part.sample_repeats
        out.inners.append(part.inner)
        out.error = out.error or part.error
        out.inner_note = out.inner_note or part.inner_note
    return out
