"""The table printed at the end of a run (and the one-line progress per row)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def _params(row: dict[str, Any]) -> str:
    """The case id without its workload and dtype prefix (they have their own columns)."""
    prefix = f"{row['workload']}-{row['dtype']}-"
    case_id = row.get("case_id", "")
    return case_id.removeprefix(prefix)


def _bandwidth(row: dict[str, Any]) -> str:
    if row.get("algbw_gbps") is None:
        return ""
    bus = row.get("busbw_gbps")
    return f"algbw {row['algbw_gbps']:.3g} GB/s, busbw " + (f"{bus:.3g} GB/s" if bus is not None else "n/a (1 rank)")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _cells(row: dict[str, Any]) -> list[str]:
    t = row.get("time_s") or {}
    median = t.get("median")
    ci = (t["ci95_high"] - t["ci95_low"]) / 2 / median if median else None
    tflops = _num(row.get("tflops"), ".3f") if row.get("timing_valid") else "-"
    missed = (row.get("timer") or {}).get("ci_target_met") is False
    note = row.get("reason") or _bandwidth(row) or row.get("mfu_reason") or row.get("timing_note") or ""
    if missed:  # a figure less precise than asked for must not read like one that made it
        note = f"CI target missed: {(row.get('timer') or {}).get('stop')}; {note}".rstrip("; ")
    sp = row.get("speedup")
    speedup = (f"{sp['value']:.2f}x [{sp['ci95_low']:.2f},{sp['ci95_high']:.2f}] {sp['verdict']}" if sp else "-")
    status = f"{row['status']}, CI missed" if missed else row["status"]
    return [row.get("phase", ""), row["workload"], row["backend"], row["dtype"], _params(row), status,
            _num(median * 1e3 if median else None, ".4g"), _pct(ci) + ("!" if missed else ""), tflops,
            _num(row.get("peak_tflops"), ".4g"), _pct(row.get("mfu")), _pct(row.get("mfu_vs_achievable")), speedup,
            note[:70]]


HEADER = ["phase", "workload", "backend", "dtype", "shape", "status", "median ms", "±CI95", "TFLOP/s",
          "peak", "MFU", "vs achievable", "speedup vs baseline", "note"]


def table(rows: Iterable[dict[str, Any]]) -> str:
    body = [_cells(r) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in body)) if body else len(h) for i, h in enumerate(HEADER)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADER, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) for cells in body]
    return "\n".join(line.rstrip() for line in lines)


def progress_line(row: dict[str, Any]) -> str:
    head = f"{row['case_id']} {row['backend']}: {row['status']}"
    if row["status"] != "ok":
        return f"{head} ({row.get('reason')})"
    if not row.get("timing_valid"):
        return f"{head} (correct; timing not valid here)"
    if row.get("tflops") is None:
        return f"{head} {_bandwidth(row) or 'no throughput figure'}"
    return f"{head} {row['tflops']:.3f} TFLOP/s, MFU {_pct(row.get('mfu'))}"
