"""Steady state of a sustained run: per-window throughput, when it settled, and first window vs settled.

Clocks and power settle only after seconds to minutes of load (boost, then power and thermal limits), so a
short benchmark can report a speed the machine does not keep. The settling rule is
harness/results/statistics/steady_windows.py's (shared with `xmfu validate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xmfu.harness.machine.telemetry.aggregate import summarize_window
from xmfu.harness.machine.telemetry.base import Reading
from xmfu.harness.results.statistics.steady_windows import settle, window_figures, window_median


def _windows(samples: Sequence[float], intervals: Sequence[tuple[float, float]], window_s: float) -> list[dict]:
    origin = intervals[0][0]
    buckets: dict[int, list[int]] = {}
    for i, (start, _) in enumerate(intervals):
        buckets.setdefault(int((start - origin) // window_s), []).append(i)
    # Samples are taken in time order, so each window holds a run of consecutive samples: `xmfu validate` re-cuts
    # them from samples.jsonl by the windows' counts (harness/results/rederive/times.py).
    return [{"index": w, "start_s": w * window_s, "span": (origin + w * window_s, origin + (w + 1) * window_s),
             "median_s": window_median([samples[i] for i in idx]), "n": len(idx)}
            for w, idx in sorted(buckets.items())]


def steady_state(samples: Sequence[float], intervals: Sequence[tuple[float, float]], window_s: float,
                 tolerance: float, readings: Sequence[Reading] = (), wrap_j: float | None = None,
                 flops: float = 0.0) -> dict[str, Any] | None:
    if len(samples) < 2 or len(samples) != len(intervals):
        return None
    windows = _windows(samples, intervals, window_s)
    for w in windows:
        inside = [r for r in readings if w["span"][0] <= r.t <= w["span"][1]]
        tel = summarize_window(inside, wrap_j) if inside else {}
        w.update({**window_figures(w["median_s"], flops),
                  "mean_sm_clock_mhz": tel.get("mean_sm_clock_mhz"), "mean_power_w": tel.get("mean_power_w")})
        del w["span"]
    return settle(windows, window_s, tolerance)
