"""Steady state of a sustained run: per-window throughput, when it settled, and first window vs settled.

Clocks and power settle only after seconds to minutes of load (boost, then power and thermal limits), so a
short benchmark can report a speed the machine does not keep. A window is steady when it and every later
window lie within `tolerance` of the final window's median.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from xmfu.harness.machine.telemetry.aggregate import summarize_window
from xmfu.harness.machine.telemetry.base import Reading


def _windows(samples: Sequence[float], intervals: Sequence[tuple[float, float]], window_s: float) -> list[dict]:
    origin = intervals[0][0]
    buckets: dict[int, list[int]] = {}
    for i, (start, _) in enumerate(intervals):
        buckets.setdefault(int((start - origin) // window_s), []).append(i)
    return [{"index": w, "start_s": w * window_s, "span": (origin + w * window_s, origin + (w + 1) * window_s),
             "median_s": float(np.median([samples[i] for i in idx])), "n": len(idx)}
            for w, idx in sorted(buckets.items())]


def steady_state(samples: Sequence[float], intervals: Sequence[tuple[float, float]], window_s: float,
                 tolerance: float, readings: Sequence[Reading] = (), wrap_j: float | None = None,
                 flops: float = 0.0) -> dict[str, Any] | None:
    if len(samples) < 2 or len(samples) != len(intervals):
        return None
    windows = _windows(samples, intervals, window_s)
    final = windows[-1]["median_s"]
    reached = next(i for i in range(len(windows))
                   if all(abs(w["median_s"] / final - 1) <= tolerance for w in windows[i:]))
    for w in windows:
        inside = [r for r in readings if w["span"][0] <= r.t <= w["span"][1]]
        tel = summarize_window(inside, wrap_j) if inside else {}
        w.update({"tflops": flops / w["median_s"] / 1e12 if flops else None,
                  "mean_sm_clock_mhz": tel.get("mean_sm_clock_mhz"), "mean_power_w": tel.get("mean_power_w")})
        del w["span"]
    first, steady = windows[0], windows[reached]
    return {"window_s": window_s, "tolerance": tolerance, "windows": windows,
            "reached_after_s": steady["start_s"], "reached": reached < len(windows) - 1 or len(windows) == 1,
            "first_window": first, "steady_window": steady,
            "first_vs_steady_time_change": first["median_s"] / steady["median_s"] - 1}
