"""The report's clocks and power over time, one figure per run, from the bundle's telemetry.jsonl.

A reading's `sm_clock_mhz` is the SM clock on NVIDIA, the GFX clock on AMD and the mean core clock on a CPU
(harness/machine/telemetry/base.py), so the axis says which. A CPU reports energy, not power (RAPL), so its
power is the energy difference between consecutive readings over their time difference; a counter that went
down (a wrap or reset) gives no point. Each case's readings are a line of their own: the gap between cases is
not drawn as if it were measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from xmfu.harness.results.analysis import grouping
from xmfu.harness.results.plots import figures
from xmfu.harness.results.schema.records import Reading

CLOCK_LABEL = {"cpu": "CPU clock, mean of cores (MHz)", "cuda": "SM clock (MHz)", "rocm": "GFX clock (MHz)"}


def clock_label(platform: str) -> str:
    return CLOCK_LABEL.get(platform, "device clock (MHz)")


def power_points(readings: Sequence[Reading]) -> tuple[list[tuple[float, float]], str]:
    """(t, watts) and where they come from: the readings' power, else RAPL energy differences."""
    direct = [(r.t, r.power_w) for r in readings if r.power_w is not None]
    if direct:
        return direct, "power (W)"
    energy = [(r.t, r.energy_j) for r in readings if r.energy_j is not None]
    derived = [((t0 + t1) / 2, (e1 - e0) / (t1 - t0)) for (t0, e0), (t1, e1) in pairwise(energy)
               if t1 > t0 and e1 >= e0]
    return derived, "power from energy counter (W)"


@figures.styled
def _figure(run_id: str, readings: Sequence[Reading], platform: str, device: str, name: str) -> str:
    t0 = min(r.t for r in readings)
    cases = grouping.group(readings, lambda r: r.case_id)
    power = next((power_points(part)[1] for part in cases.values() if power_points(part)[0]), None)
    panels = [*([("clock", clock_label(platform))] if any(r.sm_clock_mhz is not None for r in readings)
                else []), *([("power", power)] if power else [])]
    if not panels:
        return ""
    fig, axes = figures.figure(1.2 + 1.8 * len(panels), rows=len(panels), sharex=True)
    for ax, (kind, label) in zip(axes, panels, strict=True):
        for part in cases.values():
            pts = ([(r.t, r.sm_clock_mhz) for r in part if r.sm_clock_mhz is not None]
                   if kind == "clock" else power_points(part)[0])
            if pts:
                ax.plot([t - t0 for t, _ in pts], [v for _, v in pts], color=figures.COLORS[0 if kind == "clock"
                                                                                           else 1],
                        marker="o", markersize=2, linewidth=1)
        ax.set_ylabel(label)
    figures.title(fig, f"Clocks and power, run {run_id}", f"{device}: {len(cases)} cases, each a line of its own")
    axes[-1].set_xlabel("seconds since the run's first reading")
    return figures.svg(fig, name)


def telemetry(telemetry: dict[str, list[Reading]], where: dict[str, tuple[str, str]]) -> str:
    """run id -> readings, and run id -> (platform, device) from its rows."""
    out = []
    for i, (run_id, readings) in enumerate(telemetry.items()):
        if readings:
            platform, device = where.get(run_id, ("", ""))
            out.append(_figure(run_id, readings, platform, device, f"telemetry-{i}"))
    return "".join(out) or '<p class="note">No power or clock readings in these bundles.</p>'
