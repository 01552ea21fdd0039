"""From a sustained run's windows to its steady state: when it settled, and the first window against the settled.

One definition for the run (harness/engine/steady.py cuts the samples into windows by their start times) and for
`xmfu validate` (harness/results/rederive/times.py re-cuts them from samples.jsonl and the windows' sample counts).
A window is steady when it and every later window lie within `tolerance` of the final window's median.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def window_figures(median_s: float, flops: float) -> dict[str, Any]:
    """A window's time and TFLOP/s at its median (null for a workload without FLOPs, e.g. collectives)."""
    return {"median_s": median_s, "tflops": flops / median_s / 1e12 if flops and median_s > 0 else None}


def window_median(values: Sequence[float]) -> float:
    return float(np.median(np.asarray(values, dtype=np.float64)))


def settle(windows: list[dict[str, Any]], window_s: float, tolerance: float) -> dict[str, Any]:
    """The steady-state record of `windows` (each with index, start_s, median_s, n...; in time order)."""
    final = windows[-1]["median_s"]
    reached = next(i for i in range(len(windows))
                   if all(abs(w["median_s"] / final - 1) <= tolerance for w in windows[i:]))
    first, steady = windows[0], windows[reached]
    return {"window_s": window_s, "tolerance": tolerance, "windows": windows,
            "reached_after_s": steady["start_s"], "reached": reached < len(windows) - 1 or len(windows) == 1,
            "first_window": first, "steady_window": steady,
            "first_vs_steady_time_change": first["median_s"] / steady["median_s"] - 1}
