"""The energy a row's timed work took, and what follows from it: J per call, J per token, tokens/s/W, TFLOP/s/W.

Pure functions on plain series, so the engine (as a row is written) and `xmfu validate` (from telemetry.jsonl and
samples.jsonl) compute the same figures with the same code.

The timed window is exactly the row's sample intervals (perf_counter spans of its timed calls, samples.jsonl
`intervals`), never the readings' span: the readings of a case are interpolated linearly at the intervals' ends.
- `counter`: a cumulative energy counter (NVML nvmlDeviceGetTotalEnergyConsumption in mJ; amdsmi
  amdsmi_get_energy_count accumulator x counter_resolution in uJ; RAPL energy_uj, which wraps at
  max_energy_range_uj). The energy between two instants is the difference of the counter interpolated at them;
  a decrease is a wrap-around where the range is known (add it), else a reset that breaks the series.
- `integrated power`: power readings interpolated linearly (the trapezoid rule) and integrated over the intervals.
  Readings further apart than `max_gap_s` are a sampling gap: nothing is assumed between them.
Where the readings cover less than MIN_COVERAGE of the timed window the row's energy is `not measured`, with why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from xmfu.harness.results.statistics.speedup import t975

Point = tuple[float, float | None]  # (perf_counter time, value or None where the reading failed)
Interval = tuple[float, float]
MIN_COVERAGE = 0.5  # below this share of the timed window covered by readings: not measured
# throughput key a row carries -> the token kind its J per token counts (harness/results/analysis/cost.py's
# PER_MILLION: training tokens, inference prefill's prompt tokens, decode's generated tokens)
TOKEN_RATES = {"tokens_per_s": "tokens", "prompt_tokens_per_s": "prompt_tokens",
               "generated_tokens_per_s": "generated_tokens"}


@dataclass(frozen=True)
class WindowEnergy:
    """Joules over the covered part of the timed window."""

    joules: float
    covered_s: float  # seconds of the timed window the readings cover
    timed_s: float  # seconds of the timed window (sum of the intervals)

    @property
    def coverage(self) -> float:
        return self.covered_s / self.timed_s if self.timed_s > 0 else 0.0

    @property
    def mean_power_w(self) -> float | None:
        return self.joules / self.covered_s if self.covered_s > 0 else None


def _segments(points: Sequence[Point], wrap: float | None, counter: bool, max_gap_s: float | None) -> list[list]:
    """Runs of consecutive readings with values, as [[t...], [v...]]. A counter's wrap-around adds the range to
    every later value (unwrapped); a reset (a decrease without a known range), a missing value, a repeated time or
    a gap longer than max_gap_s starts a new run."""
    runs: list[list[list[float]]] = []
    offset, last = 0.0, None
    for t, v in points:
        if v is None:
            last = None
            continue
        new = last is None or t <= last[0] or (max_gap_s is not None and t - last[0] > max_gap_s)
        if counter and not new and v + offset < last[1]:
            if wrap:
                offset += wrap
            else:
                new = True
        if new:
            runs.append([[], []])
            if counter:
                offset = 0.0
        runs[-1][0].append(t)
        runs[-1][1].append(v + offset)
        last = (t, v + offset)
    return [r for r in runs if len(r[0]) >= 2]


def _integral(ts: list[float], vs: list[float], a: float, b: float) -> float:
    """The integral over [a, b] (inside [ts[0], ts[-1]]) of the piecewise-linear curve through (ts, vs)."""
    inner = [t for t in ts if a < t < b]
    grid = np.array([a, *inner, b])
    values = np.interp(grid, ts, vs)
    # the trapezoid rule written out: numpy 1.26 (the floor) has np.trapz, numpy 2 renamed it np.trapezoid
    return float(np.sum((values[1:] + values[:-1]) * np.diff(grid)) / 2)


def window_energy(points: Sequence[Point], intervals: Sequence[Interval], kind: str, wrap_j: float | None = None,
                  max_gap_s: float | None = None) -> WindowEnergy:
    """Energy over `intervals` from a counter (`kind` "counter", J) or from power readings ("power", W)."""
    counter = kind == "counter"
    runs = _segments(sorted(points, key=lambda p: p[0]), wrap_j, counter, None if counter else max_gap_s)
    joules = covered = 0.0
    for a, b in intervals:
        for ts, vs in runs:
            lo, hi = max(a, ts[0]), min(b, ts[-1])
            if hi <= lo:
                continue
            covered += hi - lo
            joules += (float(np.interp(hi, ts, vs) - np.interp(lo, ts, vs)) if counter
                       else _integral(ts, vs, lo, hi))
    timed = sum(max(b - a, 0.0) for a, b in intervals)
    return WindowEnergy(joules, covered, timed)


def per_call_j(mean_power_w: float | None, median_s: float | None) -> float | None:
    """J per call (step): the window's mean power x the median time per call, the time every rate uses."""
    return mean_power_w * median_s if mean_power_w is not None and median_s else None


def token_figures(mean_power_w: float | None, throughput: dict[str, float] | None) -> dict[str, dict[str, float]]:
    """J per token and tokens/s per W for each token kind the row counts: J/token = W / (tokens/s)."""
    out: dict[str, dict[str, float]] = {"j_per_token": {}, "tokens_per_s_per_w": {}}
    if not mean_power_w:
        return out
    for rate, kind in TOKEN_RATES.items():
        value = (throughput or {}).get(rate)
        if value:
            out["j_per_token"][kind] = mean_power_w / value
            out["tokens_per_s_per_w"][kind] = value / mean_power_w
    return out


def gaps(points: Sequence[Point], max_gap_s: float) -> int:
    """How many consecutive readings are further apart than max_gap_s."""
    times = sorted(t for t, v in points if v is not None)
    return sum(1 for a, b in pairwise(times) if b - a > max_gap_s)


def figures(kind: str, points: Sequence[Point], intervals: Sequence[Interval], wrap_j: float | None,
            max_gap_s: float | None, median_s: float | None, throughput: dict[str, float] | None,
            tflops: float | None, power_limit_w: float | None,
            parts: tuple[list[list[Interval]], str] | None = None, tdp_w: float | None = None) -> dict[str, Any]:
    """A row's energy figures from its readings (a counter's J or power's W) over its intervals: the fields of
    the row's `energy` section that follow from the data (schema/parts.py Energy), or `reason` where the readings
    cover less than MIN_COVERAGE of the window. `tdp_fraction` = mean W / the part's board power (the peak table's
    sourced `tdp`): what share of its rated power the device drew for the row's MFU."""
    got = window_energy(points, intervals, kind, wrap_j, max_gap_s)
    out: dict[str, Any] = {"timed_s": got.timed_s, "covered_s": got.covered_s,
                           "readings": sum(1 for _, v in points if v is not None),
                           "gaps": gaps(points, max_gap_s) if kind == "power" and max_gap_s else 0}
    if got.timed_s <= 0 or got.coverage < MIN_COVERAGE:
        out["reason"] = (f"readings cover {got.coverage:.0%} of the timed window ({got.covered_s:.4g} of "
                         f"{got.timed_s:.4g} s; sampling gaps or too few readings), under the {MIN_COVERAGE:.0%} "
                         "needed")
        return out
    power = got.mean_power_w
    out.update(energy_j=power * got.timed_s, mean_power_w=power, j_per_call=per_call_j(power, median_s),
               tflops_per_w=tflops / power if tflops and power else None,
               power_limit_fraction=power / power_limit_w if power_limit_w and power is not None else None,
               tdp_fraction=power / tdp_w if tdp_w and power is not None else None,
               **token_figures(power, throughput))
    if not out["j_per_token"]:
        out["j_per_token"] = out["tokens_per_s_per_w"] = None
    out["ci"] = "point figures: one window (repeats=N or a sustained run's steady windows give a CI)"
    if parts is None:
        return out
    return with_ci(out, power_ci(kind, points, parts[0], wrap_j, max_gap_s), parts[1])


def steady_intervals(intervals: Sequence[Interval], steady_state: dict[str, Any] | None) -> tuple[list[Interval], str]:
    """The intervals a sustained row's energy is taken over: those from the start of its steady state on (the
    settling rule of steady_windows.py: windows counted from the first interval's start), and the window in words.
    Rows without a steady state (or one never reached) use every timed call."""
    every = [(float(a), float(b)) for a, b in intervals]
    if not steady_state or not steady_state.get("reached") or not every:
        return every, "every timed call"
    start = every[0][0] + float(steady_state.get("reached_after_s") or 0.0)
    return [i for i in every if i[0] >= start], f"steady state: the calls from {steady_state['reached_after_s']:g} s on"


def groups(intervals: Sequence[Interval], repeats: Sequence[int] | None,
           steady_state: dict[str, Any] | None) -> tuple[list[list[Interval]], str] | None:
    """Independent parts of the window a CI can be drawn from: the repeats (repeats=N, each a whole measurement),
    else a sustained row's steady windows (window_s each, counted as steady_windows.py counts them); None where
    there are fewer than two (the figures are then point figures)."""
    every = [(float(a), float(b)) for a, b in intervals]
    if not every:
        return None
    reached = bool(steady_state and steady_state.get("reached"))
    start = every[0][0] + float(steady_state.get("reached_after_s") or 0.0) if reached else -math.inf
    tags = list(repeats) if repeats and len(repeats) == len(every) else [0] * len(every)
    kept = [(i, r) for i, r in zip(every, tags, strict=True) if i[0] >= start]
    if len({r for _, r in kept}) > 1:
        by: dict[int, list[Interval]] = {}
        label = "repeats"
    elif reached and float(steady_state.get("window_s") or 0) > 0:
        width = float(steady_state["window_s"])
        by, label = {}, f"steady windows of {width:g} s"
        kept = [(i, int((i[0] - every[0][0]) // width)) for i, _ in kept]
    else:
        return None
    for i, key in kept:
        by.setdefault(key, []).append(i)
    return (list(by.values()), label) if len(by) > 1 else None


def power_ci(kind: str, points: Sequence[Point], parts: list[list[Interval]], wrap_j: float | None,
             max_gap_s: float | None) -> tuple[float, float, int] | None:
    """The 95% CI (Student's t) of the mean power of the parts whose readings cover at least MIN_COVERAGE of
    them: (low, high, parts used); None under two such parts."""
    powers = []
    for part in parts:
        got = window_energy(points, part, kind, wrap_j, max_gap_s)
        if got.coverage >= MIN_COVERAGE and got.mean_power_w is not None:
            powers.append(got.mean_power_w)
    if len(powers) < 2:
        return None
    mean, half = float(np.mean(powers)), t975(len(powers) - 1) * float(np.std(powers, ddof=1)) / math.sqrt(len(powers))
    return mean - half, mean + half, len(powers)


def with_ci(out: dict[str, Any], ci: tuple[float, float, int] | None, label: str) -> dict[str, Any]:
    """The figures' CIs from the mean power's (J/call and J/token scale with power at the row's fixed time and
    throughput); `ci` says which, or that the figures are point figures."""
    power = out.get("mean_power_w")
    if ci is None or not power:
        return out
    low, high, n = ci
    scale = [max(low, 0.0) / power, high / power]
    out["mean_power_w_ci95"] = [max(low, 0.0), high]
    if out.get("j_per_call") is not None:
        out["j_per_call_ci95"] = [out["j_per_call"] * s for s in scale]
    if out.get("j_per_token"):
        out["j_per_token_ci95"] = {k: [v * s for s in scale] for k, v in out["j_per_token"].items()}
    out["ci"] = f"95% CI of mean power over the {n} {label} (Student's t), carried to J/call and J/token"
    return out
