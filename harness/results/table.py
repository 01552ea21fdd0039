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
    """The end-of-run table; collective rows get nccl-tests' table instead (bandwidth, no FLOPs)."""
    rows = list(rows)
    collectives = [r for r in rows if r.get("workload") == "collectives"]
    others = [r for r in rows if r.get("workload") != "collectives"]
    parts = [_compute_table(others)] if others or not collectives else []
    if collectives:
        parts.append(collectives_table(collectives))
    return "\n\n".join(parts)


def _compute_table(rows: list[dict[str, Any]]) -> str:
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


NCCL_TYPES = {"fp32": "float", "bf16": "bfloat16", "fp16": "half"}  # nccl-tests' names for the data types
REDOPS = {"all_reduce": "sum", "reduce_scatter": "sum"}  # the others move data without reducing it


def _side(row: dict[str, Any] | None) -> list[str]:
    """time (us), algbw, busbw, #wrong of one placement, as nccl-tests prints them."""
    if row is None:
        return ["", "", "", ""]
    if row["status"] != "ok":
        return [row["status"], "", "", str(row.get("wrong", "")) if row.get("wrong") is not None else ""]
    t = (row.get("time_s") or {}).get("median")
    bus = row.get("busbw_gbps")
    return [_num(t * 1e6 if t else None, ".1f"), _num(row.get("algbw_gbps"), ".2f"),
            _num(bus, ".2f") if bus is not None else "n/a", str(row.get("wrong", 0))]


def collectives_table(rows: list[dict[str, Any]]) -> str:
    """nccl-tests' table per (backend, operation, mode, type): size, count, type, redop, then time, algbw,
    busbw and #wrong out of place and in place side by side, and the average bus bandwidth."""
    groups: dict[tuple, dict[int, dict[str, Any]]] = {}
    for r in rows:
        p = r["params"]
        key = (r["backend"], p["op"], p["mode"], r["dtype"])
        groups.setdefault(key, {}).setdefault(p["size_bytes"], {})["in" if p["in_place"] else "out"] = r
    out = []
    for (backend, op, mode, dtype), sizes in sorted(groups.items()):
        item = {"fp32": 4, "bf16": 2, "fp16": 2}.get(dtype, 4)
        head = ["size (B)", "count", "type", "redop", "oop time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong",
                "ip time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"]
        body, busbw = [], []
        for size, pair in sorted(sizes.items()):
            any_row = pair.get("out") or pair.get("in")
            actual = any_row.get("size_bytes_actual") or size
            body.append([str(actual), str(actual // item), NCCL_TYPES.get(dtype, dtype), REDOPS.get(op, "none"),
                         *_side(pair.get("out")), *_side(pair.get("in"))])
            busbw += [r["busbw_gbps"] for r in pair.values() if r.get("busbw_gbps") is not None]
        widths = [max(len(h), *(len(c[i]) for c in body)) for i, h in enumerate(head)]
        out.append(f"# {backend} {op} ({mode}), ranks: {any_row.get('ranks') or any_row['notes'].get('ranks')}")
        out.append("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
        out += ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in body]
        avg = f"{sum(busbw) / len(busbw):.3g} GB/s" if busbw else "n/a (one rank)"
        out.append(f"# Avg bus bandwidth: {avg} (over this sweep's sizes: it depends on the range chosen)")
    return "\n".join(out)
