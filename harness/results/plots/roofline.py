"""The report's roofline: achieved TFLOP/s against arithmetic intensity (FLOPs per byte moved), log-log.

Roofs per (device, dtype) (Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009): the compute roof
is the row's peak TFLOP/s, drawn whenever it is known; the memory roof (HBM TB/s x FLOPs per byte) only where
the peak table has the device's memory bandwidth. A CPU's compute roof is the estimate its rows carry. Beside these
datasheet roofs, the measured ones the bundles hold (`measured_roofs`): the achievable TFLOP/s of a mamf sweep
(manifest `achievable`) and the achievable bandwidth of a membw run (manifest `summary.membw`), in solid lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from xmfu.harness.machine.peaks import load_table
from xmfu.harness.results.analysis import grouping, merge_runs
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.plots import figures
from xmfu.harness.results.plots.report_plots import MAX_SERIES, tflops_err, timed
from xmfu.harness.results.schema.row import Row

ROOF_STYLES = (("#333", "--"), ("#777", ":"), ("#333", "-."), ("#777", "--"), ("#333", ":"), ("#777", "-."))
MEASURED_STYLES = (("#000", "-"), ("#555", "-"))


@dataclass(frozen=True)
class MeasuredRoof:
    """A roof a run measured: `compute` (TFLOP/s, a mamf sweep's best) or `memory` (TB/s, a membw run's best)."""

    device: str
    kind: str
    value: float
    label: str


def measured_roofs(bundles: Sequence[Bundle]) -> list[MeasuredRoof]:
    """The measured roofs the bundles' manifests hold, on the device of each bundle's rows."""
    out = []
    for b in bundles:
        device = b.rows[0].device if b.rows else "?"
        ach = b.manifest.get("achievable")
        if isinstance(ach, dict) and str(ach.get("source", "")).startswith("mamf") and ach.get("tflops"):
            label = f"measured compute roof (mamf): {ach.get('dtype', '')} {ach['tflops']:.4g} TFLOP/s"
            out.append(MeasuredRoof(device, "compute", float(ach["tflops"]), label))
        membw = ((b.manifest.get("summary") or {}).get("membw") or {})
        if membw.get("achievable_gbps"):
            gbps = float(membw["achievable_gbps"])
            out.append(MeasuredRoof(membw.get("device") or device, "memory", gbps / 1e3,
                                    f"measured memory roof (membw {membw.get('kernel')}): {gbps:.4g} GB/s"))
    return list(dict.fromkeys(out))


def _draw_measured(ax: Any, measured: Sequence[MeasuredRoof], x_lo: float, x_hi: float) -> None:
    for roof in measured:
        color, line = MEASURED_STYLES[roof.kind == "memory"]
        xs = [x_lo, x_hi]
        ys = [roof.value] * 2 if roof.kind == "compute" else [roof.value * x_lo, roof.value * x_hi]
        ax.plot(xs, ys, color=color, linestyle=line, linewidth=1.0, label=figures.label(f"{roof.label} on "
                                                                                       f"{roof.device}"))


def roofs(rows: Sequence[Row]) -> tuple[dict[tuple[str, str], tuple[float, float | None]], list[str]]:
    """(device, dtype) -> (peak TFLOP/s, HBM TB/s or None), and a sentence per device without a memory roof."""
    entries = {e["id"]: e for e in load_table()["devices"]}
    found: dict[tuple[str, str], tuple[float, float | None]] = {}
    for r in rows:
        if r.peak_tflops:
            entry = entries.get(r.peak_entry or "") or {}
            device = f"{r.device} (CPU estimate)" if r.peak_entry == "cpu-estimate" else r.device
            found[(device, r.dtype)] = (r.peak_tflops, entry.get("hbm_tbps"))
    without = sorted({d.removesuffix(" (CPU estimate)") for (d, _), (_, bw) in found.items() if bw is None})
    return found, [f"Memory roof not drawn for {d}: the peak table has no memory bandwidth for it "
                   "(compute roof only)." for d in without]


def _draw_roofs(ax: Any, found: dict[tuple[str, str], tuple[float, float | None]], x_lo: float,
                x_hi: float) -> None:
    for k, ((device, dtype), (peak, bw)) in enumerate(sorted(found.items())):
        style = ROOF_STYLES[k % len(ROOF_STYLES)]  # grey, by line style: the colours belong to the points
        knee = peak / bw if bw else x_lo
        xs, ys = ([x_lo, knee, x_hi], [bw * x_lo, peak, peak]) if bw and knee > x_lo else ([x_lo, x_hi], [peak] * 2)
        kind = "compute and memory roof" if bw else "compute roof"
        ax.plot(xs, ys, color=style[0], linestyle=style[1], linewidth=1.2,
                label=figures.label(f"{kind}: {dtype} {peak:.4g} TFLOP/s on {device}"))


@figures.styled
def _figure(points: list[Row], found: dict[tuple[str, str], tuple[float, float | None]],
            measured: Sequence[MeasuredRoof] = ()) -> str:
    points, merged = merge_runs.merge(points)  # one marker per case across runs (merge_runs.py)
    intensity = [r.flops / r.bytes for r in points]
    knees = [p / bw for p, bw in found.values() if bw]
    x_lo, x_hi = min(intensity + knees) / 3, max(intensity + knees) * 3
    fig, (ax,) = figures.figure(4.2)
    groups = sorted(grouping.group(points, lambda r: (r.workload, r.backend, r.dtype)).items())
    groups, cut = figures.shown(groups, MAX_SERIES, "workload/backend/dtype groups")
    for k, ((workload, backend, dtype), part) in enumerate(groups):
        below, above = zip(*(tflops_err(r) for r in part), strict=True)
        ax.errorbar([r.flops / r.bytes for r in part], [r.tflops for r in part], yerr=[below, above],
                    linestyle="none", marker=figures.MARKERS[k // 10 % 10], markersize=4, capsize=2,
                    color=figures.COLORS[k % len(figures.COLORS)], label=figures.label(f"{workload} {backend} {dtype}"))
    _draw_roofs(ax, found, x_lo, x_hi)
    _draw_measured(ax, measured, x_lo, x_hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    figures.log_ticks(ax.xaxis, figures.plain_number)
    figures.log_ticks(ax.yaxis, figures.plain_number)
    ax.set_xlim(x_lo, x_hi)
    ax.set_xlabel("arithmetic intensity: FLOPs per byte moved (log scale)")
    ax.set_ylabel("achieved TFLOP/s (log scale; 95% CI)")
    figures.legend(ax, len(groups) + len(found) + len(measured))
    figures.note(ax, cut, merged)
    return figures.svg(fig, "roofline")


def roofline(rows: Sequence[Row], measured: Sequence[MeasuredRoof] = ()) -> str:
    points = [r for r in rows if timed(r) and r.bytes and r.flops and r.tflops > 0]
    if not points:
        return '<p class="note">No row has both a valid TFLOP/s figure and a byte count.</p>'
    found, notes = roofs(points)
    if not found:
        notes.append("No roof drawn: no row has a peak for its device.")
    notes += [f"{m.label} on {m.device} (solid line)" for m in measured]
    return _figure(points, found, measured) + "".join(f'<p class="note">{escape(n)}</p>' for n in notes)
