"""What the telemetry sampler says about a run and each of its rows: whether clocks were locked, a backend's share
of the case's readings with its efficiency figures, and how clocks and temperature drifted over the run."""

from __future__ import annotations

from typing import Any

from xmfu.harness.engine.timing import Series
from xmfu.harness.machine.peaks import lookup_tdp
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.telemetry import Reading, Sampler
from xmfu.harness.machine.telemetry.aggregate import efficiency, summarize_window, window
from xmfu.harness.machine.telemetry.energy_check import CounterCheck
from xmfu.harness.results.statistics import energy as energy_figures


def clocks(sampler: Sampler | None) -> dict[str, Any]:
    """Whether the device's clocks were locked for this run (NVML application/locked clocks, amdsmi performance
    level, the CPU governor), as the telemetry sampler reads it; {} when there is no sampler."""
    if sampler is None or not sampler.available:
        return {"locked": None, "reason": getattr(sampler, "reason", "telemetry disabled") or "no sampler"}
    try:
        return dict(sampler.static().get("clocks") or {"locked": None, "reason": "not reported by the sampler"})
    except Exception as exc:  # a static query that fails is recorded, not fatal
        return {"locked": None, "reason": f"{type(exc).__name__}: {exc}"}


def of_backend(sampler: Sampler | None, readings: list[Reading], rate_hz: float, series: Series | None,
               row: dict[str, Any], peak_clock: float | None) -> dict[str, Any] | None:
    """This backend's share of the case's readings, summarised, with its efficiency figures."""
    if not sampler:
        return None
    if not sampler.available:
        return {"unavailable": sampler.reason}
    if not (series and series.intervals):
        return None
    # a sampler read at the ends of the case only shares its window among the case's backends
    mine = window(readings, series.intervals, 1.0 / rate_hz) if sampler.background else readings
    summary = summarize_window(mine, sampler.energy_wrap_j)
    summary["window"] = "this backend's samples" if sampler.background else "whole case (all backends)"
    median = row["time_s"]["median"] if row.get("time_s") else None
    summary.update(efficiency(summary, row.get("tflops"), median, row.get("mfu"), peak_clock))
    if sampler.reason:
        summary["unreadable"] = sampler.reason
    return summary


def drift(a: Reading | None, b: Reading | None) -> dict[str, Any]:
    """Clock and temperature at the run's first and last readings: a run that heated up and slowed down
    says so, whatever its rows' CIs say."""
    if a is None or b is None:
        return {"readings": 0}
    out: dict[str, Any] = {"seconds": b.t - a.t}
    for name in ("sm_clock_mhz", "temp_c", "power_w"):
        first, last = getattr(a, name), getattr(b, name)
        out[name] = [first, last]
        if name == "sm_clock_mhz" and first and last:
            out["clock_change"] = last / first - 1
    return out


def energy(check: CounterCheck | None, sampler: Sampler | None, readings: list[Reading], rate_hz: float,
           series: Series | None, row: dict[str, Any], power_limit_w: float | None,
           device: DeviceInfo | None = None) -> dict[str, Any] | None:
    """The row's `energy` section: from the counter where the start-up check kept it, else power readings
    integrated, else `not measured` with why (harness/results/statistics/energy.py computes the figures). The
    TDP is `device`'s sourced board power from the peak table (peaks.lookup_tdp), never a guess."""
    scope = check.scope if check else ("cpu package" if row.get("platform") == "cpu" else "device")
    tdp = lookup_tdp(device)
    base: dict[str, Any] = {"scope": scope, "tdp_w": tdp.w, "tdp_source": tdp.source, "tdp_note": tdp.note,
                            "power_limit_w": power_limit_w or None,
                            "counter_check": check.as_dict() if check and check.ratio is not None else None}
    if not (series and series.intervals):  # checked, never timed (the Triton interpreter): no window to measure over
        return {**base, "source": "not measured",
                "reason": f"no timed calls: {row.get('timing_note') or 'the row was not timed'}"}
    if check is None or sampler is None:
        return {**base, "source": "not measured", "reason": "telemetry disabled (telemetry.enabled=false)"}
    has_counter = any(r.energy_j is not None for r in readings)
    has_power = any(r.power_w is not None for r in readings)
    if check.counter and has_counter:
        wrap = sampler.energy_wrap_j
        base.update(source="counter", counter=check.counter_name, wrap_j=wrap, reason=check.reason)
        points, kind, gap = [(r.t, r.energy_j) for r in readings], "counter", None
    elif check.power and has_power:
        gap = 5.0 / rate_hz if sampler.background else None  # five missed periods: a gap, not a slow reading
        base.update(source="integrated power", max_gap_s=gap,
                    reason=check.reason or "no energy counter readable: power readings integrated (trapezoid)")
        points, kind, wrap = [(r.t, r.power_w) for r in readings], "power", None
    else:
        why = check.reason or "neither an energy counter nor power is readable"
        return {**base, "source": "not measured", "reason": why if readings else f"no readings: {why}"}
    median = row["time_s"]["median"] if row.get("time_s") else None
    intervals, base["window"] = energy_figures.steady_intervals(series.intervals, row.get("steady_state"))
    parts = energy_figures.groups(series.intervals, series.sample_repeats, row.get("steady_state"))
    got = energy_figures.figures(kind, points, intervals, wrap, gap, median, row.get("throughput"),
                                 row.get("tflops"), power_limit_w, parts, tdp_w=tdp.w)
    if "reason" in got:
        return {**base, **got, "source": "not measured"}
    return {**base, **got}
