"""The report's plots of rows: MFU per case, TFLOP/s against problem size, collective bandwidth against size.

Each function returns HTML: the inline SVG and, under it, what was left out and why (escaped). Error bars are
the rows' 95% confidence intervals: `tflops_ci95` (the median time's CI mapped through FLOPs / t, see
harness/engine/metrics.py), divided by the peak for MFU; bus bandwidth gets the same mapping of `time_s`.
Rows whose timing is not valid here (e.g. the Triton interpreter on a CPU) have no throughput in any plot,
as in the CLI's table.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from xmfu.harness.results.analysis import flags, grouping, merge_runs
from xmfu.harness.results.plots import figures
from xmfu.harness.results.schema.row import Row

MAX_BARS = 60  # per workload; the table under the plots has every row
MAX_SERIES = 20  # lines per axes


def timed(r: Row) -> bool:
    """A row with a throughput that represents the hardware."""
    return r.status == "ok" and r.timing_valid and r.tflops is not None


def tflops_err(r: Row, scale: float = 1.0) -> tuple[float, float]:
    """(below, above) the row's TFLOP/s from its 95% CI, divided by `scale` (the peak, for MFU)."""
    ci = r.tflops_ci95 or [r.tflops, r.tflops]
    return max(r.tflops - ci[0], 0.0) / scale, max(ci[1] - r.tflops, 0.0) / scale


def _left_out(sentences: Sequence[str]) -> str:
    said = [s for s in sentences if s]
    return "".join(f'<p class="note">{escape(s)}</p>' for s in said)


@figures.styled
def _mfu_figure(workload: str, rows: list[Row], name: str) -> str:
    from matplotlib.ticker import PercentFormatter

    rows, merged = merge_runs.merge(rows)  # one bar per case across runs (merge_runs.py)
    # the field names once: computed inside the key they re-scanned every row once per row (issue 30, item 14)
    order = [*grouping.IDENTITY, *grouping.param_names(rows)]
    rows = sorted(rows, key=lambda r: tuple(grouping.sort_key(grouping.value(r, n)) for n in order))
    rows, cut = figures.shown(rows, MAX_BARS, "rows (the table below has every row)")
    names = [*grouping.IDENTITY, *grouping.param_names(rows)]
    fig, (ax,) = figures.figure(0.9 + 0.24 * len(rows))
    y = list(range(len(rows)))[::-1]
    mfu = [r.mfu for r in rows]
    err = list(zip(*(tflops_err(r, r.peak_tflops) for r in rows), strict=True))
    bars = ax.barh(y, mfu, xerr=err, color=figures.COLORS[0], height=0.7, error_kw={"elinewidth": 0.8,
                                                                                     "capsize": 2})
    # a bar's flags (contended, CI missed...) beside its figure, as in the table (harness/results/analysis/flags.py)
    marks = [merge_runs.flags_text(r) for r in rows]
    ax.bar_label(bars, labels=[f"{100 * m:.1f}%" + (f" [{f}]" if f else "") for m, f in zip(mfu, marks, strict=True)],
                 padding=4, fontsize=7)
    ax.set_yticks(y, [figures.label(s, 60) for s in grouping.labels(rows, names)])
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    if max(m + e for m, e in zip(mfu, err[1], strict=True)) >= 0.7:  # only then is 100% near the data
        ax.axvline(1.0, color="#555", linestyle="--", linewidth=1, label="datasheet peak (100%)")
        figures.legend(ax, 1)
    ax.set_xlabel("MFU: achieved TFLOP/s / dense datasheet peak (bars: median time; whiskers: 95% CI)")
    figures.title(fig, f"MFU, {workload}", f"all bars: {grouping.constant(rows, names)}")
    ax.grid(axis="y", visible=False)
    figures.note(ax, cut, merged)
    return figures.svg(fig, name)


def mfu(rows: Sequence[Row]) -> str:
    """Horizontal bars of MFU with their CI, one figure per workload."""
    shown = [r for r in rows if timed(r) and r.mfu is not None]
    drawn = {id(r) for r in shown}  # by identity: `r not in shown` compared every row with every row, O(N^2)
    without = sum(1 for r in rows if r.status == "ok" and id(r) not in drawn)
    out = [_mfu_figure(w, part, f"mfu-{i}") for i, (w, part) in
           enumerate(sorted(grouping.group(shown, lambda r: r.workload).items()))]
    why = (f"{without} ok rows have no MFU bar: no peak for the device, timing not valid here, or not a "
           "compute workload (their reason is in the table)") if without else ""
    if not out:
        return _left_out(["No row has an MFU figure.", why])
    return "".join(out) + _left_out([why, _flagged(shown)])


def _flagged(shown: Sequence[Row]) -> str:
    """A note under a plot: how many of the rows drawn carry quality flags (the table names each row's)."""
    said = flags.summary(shown)
    return f"Drawn: {said} (the flags column of the table below names each row's)" if said else ""


def _flop_axis(ax: Any) -> None:
    from matplotlib.ticker import EngFormatter

    ax.set_xscale("log")
    figures.log_ticks(ax.xaxis, EngFormatter(unit="FLOP"))


def _draw_series(ax: Any, found: dict[str, list[Row]], x: Any, y: Any, err: Any) -> str:
    """One line per series (markers only for a series of one point), at most MAX_SERIES of them."""
    items, cut = figures.shown(sorted(found.items()), MAX_SERIES, "series")
    for k, (label, part) in enumerate(items):
        below, above = zip(*(err(r) for r in part), strict=True)
        ax.errorbar([x(r) for r in part], [y(r) for r in part], yerr=[below, above], label=figures.label(label),
                    color=figures.COLORS[k % len(figures.COLORS)], marker=figures.MARKERS[k // 10 % 10],
                    markersize=4, linewidth=1.2 if len(part) > 1 else 0, capsize=2, elinewidth=0.8)
    figures.legend(ax, len(items))
    return cut


@figures.styled
def _throughput_figure(workload: str, rows: list[Row], name: str) -> str:
    rows, merged = merge_runs.merge(rows)  # one point per case across runs, so a line is a case family
    fig, (ax,) = figures.figure(3.6)
    found = grouping.series(rows, lambda r: r.flops)
    cut = _draw_series(ax, found, lambda r: r.flops, lambda r: r.tflops, tflops_err)
    _flop_axis(ax)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("problem size: FLOPs per call (log scale)")
    ax.set_ylabel("achieved TFLOP/s (95% CI)")
    names = [*grouping.IDENTITY, *grouping.param_names(rows)]
    figures.title(fig, f"TFLOP/s against problem size, {workload}", f"all points: {grouping.constant(rows, names)}")
    figures.note(ax, cut, merged)
    return figures.svg(fig, name)


def throughput(rows: Sequence[Row]) -> str:
    """TFLOP/s against FLOPs per call, one figure per workload, one line per series."""
    shown = [r for r in rows if timed(r) and r.flops]
    invalid = sum(1 for r in rows if r.status == "ok" and not r.timing_valid)
    out = [_throughput_figure(w, part, f"size-{i}") for i, (w, part) in
           enumerate(sorted(grouping.group(shown, lambda r: r.workload).items()))]
    why = f"{invalid} ok rows are not drawn: their timing is not valid here (see the table)" if invalid else ""
    if not out:
        return _left_out(["No row has a valid TFLOP/s figure.", why])
    return "".join(out) + _left_out([why, _flagged(shown)])


def busbw_err(r: Row) -> tuple[float, float]:
    """busbw ~ 1 / time, so the time CI maps to [busbw x median / ci95_high, busbw x median / ci95_low]."""
    t, bw = r.time_s, r.busbw_gbps
    if t is None or not t.ci95_low or not t.ci95_high:  # a zero bound: no interval to map
        return 0.0, 0.0
    return max(bw - bw * t.median / t.ci95_high, 0.0), max(bw * t.median / t.ci95_low - bw, 0.0)


@figures.styled
def _busbw_figure(rows: list[Row], name: str) -> str:
    fig, (ax,) = figures.figure(3.8)
    size = lambda r: r.size_bytes_actual or r.params.get("size_bytes")  # noqa: E731
    cut = _draw_series(ax, grouping.series(rows, size), size, lambda r: r.busbw_gbps, busbw_err)
    figures.byte_axis(ax)
    ax.set_yscale("log")
    figures.log_ticks(ax.yaxis, figures.plain_number)
    ax.set_xlabel("message size per rank (bytes, log scale)")
    ax.set_ylabel("bus bandwidth GB/s (log scale; 95% CI)")
    names = [*grouping.IDENTITY, *grouping.param_names(rows)]
    figures.title(fig, "Bus bandwidth against message size", f"all points: {grouping.constant(rows, names)}")
    figures.note(ax, cut)
    return figures.svg(fig, name)


def busbw(rows: Sequence[Row]) -> str:
    """Collective bus bandwidth against message size (nccl-tests' busbw), one line per series."""
    shown = [r for r in rows if r.status == "ok" and r.timing_valid and r.busbw_gbps]
    one_rank = sum(1 for r in rows if r.status == "ok" and r.algbw_gbps is not None and r.busbw_gbps is None)
    why = f"{one_rank} rows have no bus bandwidth (one rank: nothing crosses a link)" if one_rank else ""
    if not shown:
        return _left_out(["No collective row has a bus bandwidth.", why])
    return _busbw_figure(shown, "busbw") + _left_out([why, _flagged(shown)])
