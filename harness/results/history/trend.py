"""`xmfu history trend -o FILE`: a metric over time (or the gap between two platforms), as an SVG file or a
self-contained HTML page (inline SVG drawn by matplotlib, a table of every series; no script, no network).

One axes per workload, one line per series (parquet.SERIES_KEY: runs with different comparability keys are
different lines, never one), dates on the x axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, timedelta, timezone
from html import escape
from typing import Any

from xmfu.harness.results.history import judge
from xmfu.harness.results.plots import figures

MAX_SERIES = 20  # lines per axes
METRIC_LABELS = {"mfu": "MFU (of the dense datasheet peak)", "tflops": "achieved TFLOP/s",
                 "median_s": "median time per call (s)", "ci95_low_s": "95% CI low of the time (s)",
                 "ci95_high_s": "95% CI high of the time (s)", "cv": "coefficient of variation of the time",
                 "busbw_gbps": "bus bandwidth (GB/s)",
                 "tokens_per_s": "tokens per second (training; inference: prompt tokens prefill, generated decode)",
                 "ttft_s": "time to first token, median (s)", "ttft_p99_s": "time to first token, p99 (s)",
                 "tpot_s": "time per output token, median (s)", "tpot_p99_s": "time per output token, p99 (s)",
                 "mbu": "MBU (of the peak memory bandwidth)",
                 "mean_power_w": "mean device power over the timed calls (W)",
                 "j_per_token": "energy per token (J; device)", "tokens_per_s_per_w": "tokens per second per watt",
                 "tflops_per_w": "TFLOP/s per watt"}
Point = tuple[datetime | date, float]
Groups = dict[str, dict[str, list[Point]]]  # workload -> line label -> points in time order


def series_groups(found: dict[tuple, list[tuple[datetime, float]]]) -> Groups:
    """judge.series() output, by workload, each line labelled by what tells it apart."""
    out: Groups = {}
    keys = list(found)
    for key, points in sorted(found.items(), key=lambda kv: tuple(map(str, kv[0]))):
        workload, case_id, dtype = key[0], key[1], key[4]
        label = judge.series_label(key, keys).removeprefix(f"{workload} ")
        label = label.removeprefix(f"{workload}-{dtype}-") if case_id.startswith(f"{workload}-{dtype}-") else label
        out.setdefault(str(workload), {})[label] = points
    return out


def gap_groups(points: Sequence[dict[str, Any]]) -> Groups:
    """judge.gap() output: one line per (case, dtype, comparability key), by workload."""
    keys = {(p["case_id"], p["dtype"]): set() for p in points}
    for p in points:
        keys[(p["case_id"], p["dtype"])].add(p.get("comparability_key"))
    out: Groups = {}
    for p in points:
        twins = len(keys[(p["case_id"], p["dtype"])]) > 1
        label = f"{p['case_id']} {p['dtype']}" + (f" [key {p.get('comparability_key')}]" if twins else "")
        out.setdefault(p["workload"], {}).setdefault(label, []).append((date.fromisoformat(p["day"]), p["ratio"]))
    return out


def date_axis(ax: Any, groups: Groups) -> None:
    """Dates as dates (ConciseDateFormatter: '03 Nov', the year once), over the runs' span padded by a day or
    5% (matplotlib would widen a single date to years)."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    times = [moment(t) for lines in groups.values() for pts in lines.values() for t, _ in pts]
    pad = max(timedelta(days=1), (max(times) - min(times)) * 0.05)
    ax.set_xlim(min(times) - pad, max(times) + pad)
    locator = AutoDateLocator(minticks=3, maxticks=8)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))


def moment(t: datetime | date) -> datetime:
    return t if isinstance(t, datetime) else datetime(t.year, t.month, t.day, tzinfo=timezone.utc)


Mark = tuple[datetime | date, float, bool]  # a flagged point: when, value, for the worse


def events(ax: Any, found: Sequence[tuple[datetime | date, str]]) -> None:
    """Software changes as dotted vertical lines, each labelled at the top (the page's table says what)."""
    for t, label in found:
        ax.axvline(moment(t), color="#777", linestyle=":", linewidth=1)
        ax.annotate(figures.text(label, 20), xy=(moment(t), 1.0), xycoords=("data", "axes fraction"),
                    xytext=(2, -2), textcoords="offset points", fontsize=7, color="#555", va="top")


def _marks(ax: Any, marks: Sequence[Mark]) -> int:
    """Changes beyond the noise: red crosses for the worse, green for the better; the legend entries added."""
    drawn = 0
    for worse, color, name in ((True, "#c00000", "regression (history check)"), (False, "#1a8f1a", "improvement")):
        chosen = [(moment(t), v) for t, v, w in marks if w == worse]
        if chosen:
            ax.scatter(*zip(*chosen, strict=True), marker="X", s=60, color=color, zorder=5, label=name)
            drawn += 1
    return drawn


@figures.styled
def figure(groups: Groups, title: str, ylabel: str, parity: bool = False,
           marks: dict[str, list[Mark]] | None = None, changes: Sequence[tuple[datetime | date, str]] = ()) -> Any:
    """One axes per workload; `parity` draws the 1.0 line of a ratio; `marks` (by workload) flag points,
    `changes` draw the software changes as vertical lines."""
    from matplotlib.ticker import PercentFormatter

    fig, axes = figures.figure(0.8 + 3.0 * len(groups), rows=len(groups), sharex=True)
    for ax, (workload, lines) in zip(axes, sorted(groups.items()), strict=True):
        items, cut = figures.shown(sorted(lines.items()), MAX_SERIES, "series (--workload narrows the plot)")
        for k, (label, points) in enumerate(items):
            ax.plot([moment(t) for t, _ in points], [v for _, v in points], label=figures.label(label),
                    color=figures.COLORS[k % len(figures.COLORS)], marker=figures.MARKERS[k // 10 % 10],
                    markersize=4, linewidth=1.2)
        if parity:
            ax.axhline(1.0, color="#555", linestyle="--", linewidth=1, label="parity (1.0)")
        extra = _marks(ax, (marks or {}).get(workload, []))
        events(ax, changes)
        if ylabel.startswith("MFU"):
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        date_axis(ax, groups)
        ax.set_ylabel(figures.text(ylabel))
        ax.set_title(figures.text(workload), loc="left", fontsize=9)
        figures.legend(ax, len(items) + parity + extra)
        figures.note(ax, cut)
    axes[-1].set_xlabel("date of the run (UTC)")
    figures.title(fig, title)
    return fig


def svg_file(fig: Any) -> str:
    return figures.standalone_svg(fig, "trend")


def html_page(fig: Any, title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """The plot and a table of every series, everything escaped."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    style = ("body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}table{border-collapse:collapse;"
             "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}th{background:#f3f3f3}"
             "svg.plot{display:block;max-width:100%;height:auto;margin:12px 0}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{style}"
            f"</style></head><body><h1>{escape(title)}</h1>{figures.svg(fig, 'trend')}<table><tr>{head}</tr>"
            f"{body}</table></body></html>")


def series_table(groups: Groups) -> tuple[list[str], list[list[Any]]]:
    """Per line: points, first and latest date and value, change from first to latest."""
    header = ["workload", "series", "points", "first", "latest", "first value", "latest value", "change"]
    rows = []
    for workload, lines in sorted(groups.items()):
        for label, pts in sorted(lines.items()):
            (t0, v0), (t1, v1) = pts[0], pts[-1]
            change = f"{100 * (v1 / v0 - 1):+.1f}%" if v0 else ""
            rows.append([workload, label, len(pts), _day(t0), _day(t1), f"{v0:.4g}", f"{v1:.4g}", change])
    return header, rows


def _day(t: datetime | date) -> str:
    return t.isoformat(timespec="minutes") if isinstance(t, datetime) else t.isoformat()
