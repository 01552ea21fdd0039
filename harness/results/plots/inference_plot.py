"""The inference section of the report: decode throughput and MBU against batch size, one line per backend,
device, dtype and shape (xmfu.harness.results.plots.inference_figures builds the series)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from xmfu.harness.results.analysis import flags
from xmfu.harness.results.plots import figures
from xmfu.harness.results.plots.inference_figures import inference_series, plotted
from xmfu.harness.results.schema.row import Row


@figures.styled
def _figure(series: list[dict[str, Any]], name: str) -> str:
    fig, (ax,) = figures.figure(3.6)
    kept, cut = figures.shown(series, 12, "series")
    for s in kept:
        xs, ys = zip(*s["points"], strict=True)
        ax.plot(xs, ys, marker="o", label=figures.label(s["label"]))
    ax.set_xscale("log", base=2)
    figures.log_ticks(ax.xaxis, lambda v: f"{v:g}")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch (sequences decoded together, log scale)")
    ax.set_ylabel(figures.text(series[0]["y_label"], 80))
    figures.legend(ax, len(kept))  # beside the axes: over the lines ("best") it hid points
    figures.title(fig, f"Decode: {series[0]['y_label']} against batch")
    figures.note(ax, cut)
    return figures.svg(fig, name)


def inference(rows: Sequence[Row]) -> str:
    """Decode tokens/s and MBU against batch; says so when a metric has no point (e.g. MBU without a known
    peak memory bandwidth)."""
    series = inference_series(rows)
    if not series:
        return "<p class='note'>No timed decode row in these bundles.</p>" if any(
            r.workload == "inference" for r in rows) else "<p>No inference rows.</p>"
    out = []
    for i, metric in enumerate(("decode_tokens_per_s", "mbu")):
        part = [s for s in series if s["metric"] == metric]
        out.append(_figure(part, f"inference-{i}") if part else
                   f"<p class='note'>No {metric} figure: the device's peak memory bandwidth is not known here "
                   "(pass peak_membw_gbps=).</p>")
    said = flags.summary(r for r in rows if plotted(r))  # the decode rows drawn: their flags, counted
    return "".join(out) + (f"<p class='note'>Drawn: {escape(said)} (the table below names each row's)</p>"
                           if said else "")
