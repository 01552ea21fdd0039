"""From a series of readings to the per-case figures: energy, power, clocks, throttling, clock-adjusted MFU.

Pure functions on recorded readings, so they are tested with made-up series (wrap-around, gaps).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from xmfu.harness.machine.telemetry.base import Reading


def counter_energy(points: Sequence[tuple[float, float | None]], wrap_j: float | None) -> tuple[float, float]:
    """(joules, seconds covered) from a cumulative energy counter read at times t.

    A decrease is a wrap-around when the counter's range is known (add the range), otherwise a reset: that
    interval is a gap and not counted. A missing value (None) is a gap too.
    """
    joules = seconds = 0.0
    for (t0, e0), (t1, e1) in pairwise(points):
        if e0 is None or e1 is None or t1 <= t0:
            continue
        delta = e1 - e0
        if delta < 0:
            if not wrap_j:
                continue
            delta += wrap_j
        joules += delta
        seconds += t1 - t0
    return joules, seconds


def _inside(t: float, intervals: Sequence[tuple[float, float]]) -> bool:
    return any(a <= t <= b for a, b in intervals)


def window(readings: Sequence[Reading], intervals: Sequence[tuple[float, float]], slack: float) -> list[Reading]:
    """Readings taken while this backend was being timed (each interval widened by `slack`, the sampling
    period, since a reading lands anywhere inside it)."""
    wide = [(a - slack, b + slack) for a, b in intervals]
    return [r for r in readings if _inside(r.t, wide)]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_window(readings: Sequence[Reading], wrap_j: float | None) -> dict[str, Any]:
    if not readings:
        return {"readings": 0}
    power = [r.power_w for r in readings if r.power_w is not None]
    joules, seconds = counter_energy([(r.t, r.energy_j) for r in readings], wrap_j)
    counter_power = joules / seconds if seconds > 0 else None
    known = [r for r in readings if r.throttle is not None]  # None: reasons not readable, not "none active"
    reasons = sorted({name for r in known for name in r.throttle})
    clocks = [r.sm_clock_mhz for r in readings if r.sm_clock_mhz is not None]
    temps = [r.temp_c for r in readings if r.temp_c is not None]
    return {
        "readings": len(readings),
        # The energy counter integrates everything between readings; instantaneous power samples may miss
        # spikes. Prefer the counter where there is one.
        "mean_power_w": counter_power if counter_power is not None else _mean(power),
        "power_source": "energy counter" if counter_power is not None else ("power readings" if power else None),
        "max_power_w": max(power) if power else None,
        "mean_sm_clock_mhz": _mean(clocks),
        "min_sm_clock_mhz": min(clocks) if clocks else None,
        "max_temp_c": max(temps) if temps else None,
        "throttle_fraction": {n: sum(n in r.throttle for r in known) / len(known) for n in reasons} if known else None,
        "throttle_readings": len(known),
        "power_reading_sources": sorted({r.power_source for r in readings if r.power_source}),
        "power_limit_w": next((r.power_limit_w for r in readings if r.power_limit_w is not None), None),
    }


def efficiency(summary: dict[str, Any], tflops: float | None, median_s: float | None, mfu: float | None,
               peak_clock_mhz: float | None) -> dict[str, Any]:
    """Energy per call, TFLOP/s per watt, and MFU against the peak scaled to the observed clock.

    Clock-adjusted MFU = achieved / (peak x observed clock / the clock the peak assumes): how close the
    kernels came to what the silicon could do at the clock it actually ran.
    """
    power, clock = summary.get("mean_power_w"), summary.get("mean_sm_clock_mhz")
    out: dict[str, Any] = {"energy_per_iter_j": power * median_s if power and median_s else None,
                           "tflops_per_watt": tflops / power if power and tflops else None,
                           "mfu_clock_adjusted": None, "peak_clock_mhz": peak_clock_mhz}
    if mfu is not None and clock and peak_clock_mhz:
        out["mfu_clock_adjusted"] = mfu * peak_clock_mhz / clock
    return out
