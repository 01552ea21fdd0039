"""`xmfu report`: one self-contained HTML file (inline SVG drawn by matplotlib, no script, no network).

What runs where (the coverage matrix); MFU per case with its 95% CI; TFLOP/s against problem size; collective
bus bandwidth against message size; distributed training's scaling efficiency and exposed communication
per strategy; inference decode figures; a roofline; clocks and power over time; every row; each bundle's
environment. Every text from a bundle is escaped, in the HTML and inside the plots (harness/results/plots/figures.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any

from xmfu.harness.results.analysis import coverage, flags
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.plots import inference_plot, report_plots, roofline, telemetry_plot
from xmfu.harness.results.render import scaling_table
from xmfu.harness.results.render.html_table import html_table, with_contents
from xmfu.harness.results.schema.row import Row

STYLE = """body{font-family:sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
th{background:#f3f3f3}h2{margin-top:32px}.bad{color:#b00}pre{font-size:11px;white-space:pre-wrap}
svg.plot{display:block;max-width:100%;height:auto;margin:12px 0}.note{color:#a00;font-size:13px}
.cov-ok{background:#e3f4e3}.cov-incorrect{background:#f8d0d0}.cov-failed{background:#fbe3cf}
.cov-skipped{background:#f1f1d6}.cov-not-run{background:#eee;color:#777}.flagged{background:#fff1cc}
.judgement{font-size:20px;margin:0 0 8px}"""
HEAD = ("run", "workload", "backend", "device", "dtype", "case", "status", "flags", "median ms", "TFLOP/s",
        "TFLOP/s 95% CI", "peak TFLOP/s", "MFU", "busbw GB/s", "reason / note")


def _pct(x: Any) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def _num(x: Any) -> str:
    return "" if x is None else (f"{x:.4g}" if isinstance(x, float) else str(x))


def _cells(r: Row) -> tuple[Any, ...]:
    """A row as the CLI's table shows it: no TFLOP/s where the timing does not represent the hardware, and the
    row's quality flags (harness/results/analysis/flags.py) beside its status."""
    valid = r.timing_valid
    ci = r.tflops_ci95 if valid else None
    note = r.reason or r.mfu_reason or r.timing_note or ""
    if r.status == "ok" and not valid:
        note = f"timing not valid here: {r.timing_note or 'see the row'}"
    return (r.run_id, r.workload, r.backend, r.device, r.dtype, r.case_id, r.status,
            flags.flags_text(r), _num(r.time_s.median * 1e3) if r.time_s is not None else "",
            _num(r.tflops) if valid else "",
            f"[{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "", _num(r.peak_tflops),
            _pct(r.mfu) if valid else "", _num(r.busbw_gbps), note)


def _table(rows: list[Row]) -> str:
    marks = ["bad" if r.status != "ok" else "flagged" if flags.row_flags(r) else None for r in rows]
    return html_table(HEAD, [_cells(r) for r in rows], marks)


def _runs(bundles: Sequence[Bundle]) -> str:
    cells = ("run_id", "created", "status", "workload", "git_sha")
    return html_table(cells, [[b.manifest.get(c) for c in cells] for b in bundles])


def _environments(bundles: Sequence[Bundle], envs: Sequence[dict[str, Any]]) -> str:
    return "".join(f"<details><summary>{escape(b.manifest['run_id'])}</summary><pre>"
                   f"{escape(json.dumps(e, indent=1, sort_keys=True, default=str))}</pre></details>"
                   for b, e in zip(bundles, envs, strict=True))


def build(bundles: Sequence[Bundle], envs: Sequence[dict[str, Any]],
          telemetry: dict[str, list[dict[str, Any]]], lead: Sequence[tuple[str, str]] = (),
          title: str = "xmfu report", first: str = "") -> str:
    """The page; `lead`: (title, HTML) sections put first (a suite's verdict), their HTML already escaped;
    `first`: HTML (escaped) put before everything, the title included (a suite's PASS / FAIL / NOT JUDGED)."""
    rows = [r for b in bundles for r in b.rows]
    where = {r.run_id: (r.platform, r.device) for r in rows}
    sections = (
        *lead,
        ("Runs", _runs(bundles)),
        ("What runs on day one", "<p>Each workload, backend, dtype and variant against each platform and device: "
         "ok when every size ran and matched the reference; otherwise the worst status with its reason.</p>"
         + coverage.render_html(coverage.coverage(coverage.of_row(r) for r in rows))),
        ("MFU", report_plots.mfu(rows)),
        ("Throughput against problem size", report_plots.throughput(rows)),
        ("Collective bus bandwidth against message size", report_plots.busbw(rows)),
        ("Distributed training: scaling efficiency and exposed communication per strategy",
         scaling_table.scaling_table(rows)),
        ("Inference: decode throughput and bandwidth utilization", inference_plot.inference(rows)),
        ("Roofline", roofline.roofline(rows, roofline.measured_roofs(bundles))),
        ("Clocks and power", telemetry_plot.telemetry(telemetry, where)),
        ("Every row", _table(rows)),
        ("Environments", _environments(bundles, envs)),
    )
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{STYLE}</style>"
            f"</head><body>{first}<h1>{escape(title)}</h1>{with_contents(sections)}</body></html>")
