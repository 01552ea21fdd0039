"""The distributed-training section of the report: per strategy, the scaling efficiency against the single-device
step of the same run and the communication the step exposes. Rows in, one HTML table out.

Which rows: transformer rows whose `params.parallel` names a strategy other than `none` (workloads/transformer
writes `scaling_efficiency`, `comm_*` and `overlap` into them; the README's "Distributed training step" section
defines each figure). A figure a row does not have is left blank, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xmfu.harness.results.analysis.flags import flags_text, scaling_not_credible
from xmfu.harness.results.render.html_table import html_table
from xmfu.harness.results.schema.row import Row

HEAD = ("run", "backend", "device", "dtype", "model", "strategy", "scaling", "devices", "global batch", "status",
        "flags", "step ms (slowest rank)", "MFU per device", "scaling efficiency", "comm bytes / rank",
        "comm alone ms", "comm exposed ms", "overlap", "comm GB/s", "how exposed was measured / reason")


def distributed_rows(rows: Iterable[Row]) -> list[Row]:
    """The rows of a distributed strategy (not the single-device baseline), in input order."""
    return [r for r in rows if r.workload == "transformer" and r.params.get("parallel") not in (None, "none")]


def _ms(x: Any) -> str:
    return "" if not isinstance(x, (int, float)) else f"{x * 1e3:.4g}"


def _pct(x: Any) -> str:
    return "" if not isinstance(x, (int, float)) else f"{100 * x:.1f}%"


def _bytes(x: Any) -> str:
    if not isinstance(x, (int, float)):
        return ""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.0f} B"


def _overlap(r: Row) -> str:
    """The overlap, saying when it was clamped to [0, 1] and what it measured before."""
    overlap = _pct(r.overlap)
    if overlap and r.comm is not None and r.comm.clamped:
        raw = r.comm.overlap_raw
        overlap += f" (clamped; raw {raw:.3g})" if isinstance(raw, (int, float)) else " (clamped)"
    return overlap


def cells(r: Row) -> tuple[str, ...]:
    """One row of the table; a scaling efficiency above 1 is marked not credible, with the row's note."""
    p = r.params
    median = r.time_s.median if r.time_s is not None else None
    how = r.reason or (r.comm.exposed_method if r.comm is not None else None) or ""
    efficiency = _pct(r.scaling_efficiency)
    if efficiency and scaling_not_credible(r):  # older bundles too
        efficiency += " (not credible: above 100%)"
        how = f"{r.scaling_note or 'scaling efficiency above 1: not credible'}; {how}"
    return tuple(str(c) for c in (
        r.run_id, r.backend, r.device, r.dtype, p.get("name"), p.get("parallel"),
        p.get("scaling"), p.get("world_size"), p.get("global_batch"), r.status, flags_text(r), _ms(median),
        _pct(r.mfu) if r.timing_valid else "", efficiency,
        _bytes(r.comm_bytes_per_rank), _ms(r.comm_total_s), _ms(r.comm_exposed_s), _overlap(r),
        "" if r.comm_achieved_gbps is None else f"{r.comm_achieved_gbps:.4g}", how))


def scaling_table(rows: Iterable[Row]) -> str:
    """The HTML table, or a line saying there is no distributed row."""
    picked = distributed_rows(rows)
    if not picked:
        return "<p>No distributed training rows (workload.parallel=none or no transformer workload).</p>"
    intro = ("<p>Scaling efficiency = MFU per device / MFU of the single-device step of the same backend in the "
             "same run. Comm alone: the step's collectives timed by themselves; comm exposed: step time minus "
             "the same step without its collectives; overlap = 1 - exposed / alone.</p>")
    return intro + html_table(HEAD, [cells(r) for r in picked],
                              [None if r.status == "ok" else "bad" for r in picked])
