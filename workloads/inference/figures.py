"""From an inference row's raw samples to its latency percentiles and its model bandwidth utilisation."""

from __future__ import annotations

from typing import Any

import numpy as np

from xmfu.harness.machine.peaks import BandwidthPeak
from xmfu.workloads.inference.arithmetic import mbu

PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}


def latency(samples: list[float]) -> dict[str, Any] | None:
    """p50/p90/p99 and mean of per-event samples (seconds), numpy's linear interpolation between order
    statistics; `n` says how many there were (a p99 of fewer than 100 samples interpolates the slowest ones).
    None when nothing was timed."""
    if not samples:
        return None
    values = np.asarray(samples, dtype=np.float64)
    out: dict[str, Any] = {name: float(np.percentile(values, q)) for name, q in PERCENTILES.items()}
    out.update(mean=float(values.mean()), n=len(samples))
    return out


def mbu_fields(step_bytes: float | None, median_s: float | None, membw: BandwidthPeak,
               not_applicable: str | None) -> dict[str, Any]:
    """`mbu` against the device's peak memory bandwidth, with the peak's provenance; null with the reason when
    the phase has none, the timing does not represent the hardware, or the peak is unknown (as for MFU)."""
    out: dict[str, Any] = {**membw.as_row(), "mbu": None, "mbu_reason": None}
    if not_applicable is not None:
        out["mbu_reason"] = not_applicable
    elif step_bytes is None or not median_s:
        out["mbu_reason"] = "no valid time"
    elif membw.gbps is None:
        out["mbu_reason"] = membw.note
    else:
        out["mbu"] = mbu(step_bytes, median_s, membw.gbps)
    return out
