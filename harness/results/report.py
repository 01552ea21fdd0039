"""`xmfu report`: one self-contained HTML file (inline SVG, no script, no network) from bundles.

MFU by workload, backend and device; TFLOP/s against problem size; collective bus bandwidth against size;
a roofline (achieved TFLOP/s against arithmetic intensity under the compute and memory roofs); clocks and
power over time; every row and each bundle's environment. Everything shown is escaped.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from html import escape
from typing import Any

from harness.results.reader import Bundle
from harness.machine.peaks import load_table
from harness.results.svg import bar_chart, line_chart, loglog_chart

STYLE = """body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}th{background:#f3f3f3}h2{margin-top:32px}
.bad{color:#b00}pre{font-size:11px;white-space:pre-wrap}"""


def _pct(x: Any) -> str:
    return "" if x is None else f"{100 * x:.1f}%"


def _num(x: Any) -> str:
    return "" if x is None else (f"{x:.4g}" if isinstance(x, float) else str(x))


def _rows(bundles: Sequence[Bundle]) -> list[dict[str, Any]]:
    return [r for b in bundles for r in b.cases]


def _mfu_chart(rows: list[dict[str, Any]]) -> str:
    bars = [(f"{r['workload']} {r['backend']} {r['dtype']} {r['device']} {r['case_id'].split('-', 2)[-1]}", r["mfu"])
            for r in rows if r["status"] == "ok" and r.get("mfu") is not None]
    return bar_chart(bars[:60], "MFU (achieved / dense datasheet peak)", "MFU")


def _size_charts(rows: list[dict[str, Any]]) -> str:
    tflops: dict[str, list[tuple[float, float]]] = defaultdict(list)
    busbw: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if r["status"] != "ok" or not r.get("timing_valid"):
            continue
        if r.get("tflops") and r.get("flops"):
            tflops[f"{r['workload']} {r['backend']} {r['dtype']}"].append((math.log10(r["flops"]), r["tflops"]))
        if r.get("busbw_gbps") is not None:
            ranks = r.get("ranks") or (r.get("notes") or {}).get("ranks")
            label = f"{r['backend']} {r['params']['op']} {'in' if r['params']['in_place'] else 'out'} n={ranks}"
            busbw[label].append((math.log2(r["size_bytes_actual"]), r["busbw_gbps"]))
    return (line_chart(tflops, "TFLOP/s against problem size", "log10 FLOPs per call", "TFLOP/s")
            + line_chart(busbw, "Collective bus bandwidth against size", "log2 bytes", "busbw GB/s"))


def _roofline(rows: list[dict[str, Any]]) -> str:
    entries = {e["id"]: e for e in load_table()["devices"]}
    points: dict[str, list[tuple[float, float]]] = defaultdict(list)
    roofs: dict[str, tuple[float, float]] = {}
    for r in rows:
        if r["status"] == "ok" and r.get("timing_valid") and r.get("tflops") and r.get("bytes"):
            points[f"{r['workload']} {r['backend']}"].append((r["flops"] / r["bytes"], r["tflops"]))
            entry = entries.get(r.get("peak_entry") or "")
            if r.get("peak_tflops") and entry and entry.get("hbm_tbps"):
                roofs[r["device"]] = (r["peak_tflops"], entry["hbm_tbps"])
    note = "" if roofs else "<p>No roof drawn: the peak table has no memory bandwidth for these devices.</p>"
    return loglog_chart(points, roofs, "Roofline: achieved TFLOP/s against arithmetic intensity",
                        "FLOPs per byte", "TFLOP/s") + note


def _telemetry_charts(telemetry: dict[str, list[dict[str, Any]]]) -> str:
    out = []
    for run_id, readings in telemetry.items():
        if not readings:
            continue
        t0 = readings[0]["t"]
        for field, label in (("sm_clock_mhz", "SM clock MHz"), ("power_w", "power W")):
            pts = [(r["t"] - t0, r[field]) for r in readings if r.get(field) is not None]
            if pts:
                out.append(line_chart({run_id: pts}, f"{label} over time ({run_id})", "seconds", label))
    return "".join(out) or "<p>No power or clock readings in these bundles.</p>"


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("run", "workload", "backend", "device", "dtype", "case", "status", "median ms", "TFLOP/s", "peak",
            "MFU", "busbw GB/s", "reason / note")
    body = []
    for r in rows:
        t = r.get("time_s") or {}
        cells = (r["run_id"], r["workload"], r["backend"], r["device"], r["dtype"], r["case_id"], r["status"],
                 _num(t["median"] * 1e3) if t.get("median") else "", _num(r.get("tflops")),
                 _num(r.get("peak_tflops")), _pct(r.get("mfu")), _num(r.get("busbw_gbps")),
                 r.get("reason") or r.get("mfu_reason") or "")
        cls = "" if r["status"] == "ok" else ' class="bad"'
        body.append(f"<tr{cls}>" + "".join(f"<td>{escape(str(c))}</td>" for c in cells) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>" + "".join(body)
            + "</table>")


def build(bundles: Sequence[Bundle], envs: Sequence[dict[str, Any]],
          telemetry: dict[str, list[dict[str, Any]]]) -> str:
    rows = _rows(bundles)
    runs = "".join(
        f"<tr><td>{escape(b.manifest['run_id'])}</td><td>{escape(str(b.manifest.get('created')))}</td>"
        f"<td>{escape(str(b.manifest.get('status')))}</td><td>{escape(str(b.manifest.get('workload')))}</td>"
        f"<td>{escape(str(b.manifest.get('git_sha')))}</td></tr>" for b in bundles)
    envs_html = "".join(
        f"<details><summary>{escape(b.manifest['run_id'])}</summary><pre>"
        f"{escape(json.dumps(e, indent=1, sort_keys=True, default=str))}</pre></details>"
        for b, e in zip(bundles, envs, strict=True))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>xmfu report</title>"
            f"<style>{STYLE}</style></head><body><h1>xmfu report</h1>"
            f"<table><tr><th>run</th><th>created</th><th>status</th><th>workload</th><th>git sha</th></tr>{runs}"
            f"</table><h2>MFU</h2>{_mfu_chart(rows)}<h2>Throughput against size</h2>{_size_charts(rows)}"
            f"<h2>Roofline</h2>{_roofline(rows)}<h2>Clocks and power</h2>{_telemetry_charts(telemetry)}"
            f"<h2>Every row</h2>{_table(rows)}<h2>Environments</h2>{envs_html}</body></html>")
