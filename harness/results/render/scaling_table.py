"""The distributed-training section of the report: per strategy, the scaling efficiency against the single-device
step of the same run and the communication the step exposes. Rows in, one HTML table out.

Which rows: transformer rows whose `params.parallel` names a strategy other than `none` (workloads/transformer
writes `scaling_efficiency`, `comm_*` and `overlap` into them; the README's "Distributed training step" section
defines each figure). A figure a row does not have is left blank, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from xmfu.harness.results.analysis.flags import flags_text, scaling_not_credible
from xmfu.harness.results.render.html_table import html_table

HEAD = ("run", "backend", "device", "dtype", "model", "strategy", "scaling", "devices", "global batch", "status",
        "flags", "step ms (slowest rank)", "MFU per device", "scaling efficiency", "comm bytes / rank",
        "comm alone ms", "comm exposed ms", "overlap", "comm GB/s", "how exposed was measured / reason")


def distributed_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of a distributed strategy (not the single-device baseline), in input order."""
    return [r for r in rows if r.get("workload") == "transformer"
            and (r.get("params") or {}).get("parallel") not in (None, "none")]


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


def cells(r: Mapping[str, Any]) -> tuple[str, ...]:
    """One row of the table; the overlap says when it was clamped to [0, 1] and what it measured before, and a
    scaling efficiency above 1 is marked not credible, with the row's note."""
    p, comm = r.get("params") or {}, r.get("comm") or {}
    median = (r.get("time_s") or {}).get("median")
    overlap = _pct(r.get("overlap"))
    if overlap and comm.get("clamped"):
        overlap += f" (clamped; raw {comm.get('overlap_raw'):.3g})" if isinstance(
            comm.get("overlap_raw"), (int, float)) else " (clamped)"
    how = r.get("reason") or comm.get("exposed_method") or ""
    efficiency = _pct(r.get("scaling_efficiency"))
    if efficiency and scaling_not_credible(r):  # older bundles too
        efficiency += " (not credible: above 100%)"
        how = f"{r.get('scaling_note') or 'scaling efficiency above 1: not credible'}; {how}"
    return tuple(str(c) for c in (
        r.get("run_id"), r.get("backend"), r.get("device"), r.get("dtype"), p.get("name"), p.get("parallel"),
        p.get("scaling"), p.get("world_size"), p.get("global_batch"), r.get("status"), flags_text(r), _ms(median),
        _pct(r.get("mfu")) if r.get("timing_valid") else "", efficiency,
        _bytes(r.get("comm_bytes_per_rank")), _ms(r.get("comm_total_s")), _ms(r.get("comm_exposed_s")), overlap,
        "" if r.get("comm_achieved_gbps") is None else f"{r['comm_achieved_gbps']:.4g}", how))


def scaling_table(rows: Iterable[Mapping[str, Any]]) -> str:
    """The HTML table, or a line saying there is no distributed row."""
    picked = distributed_rows(rows)
    if not picked:
        return "<p>No distributed training rows (workload.parallel=none or no transformer workload).</p>"
    intro = ("<p>Scaling efficiency = MFU per device / MFU of the single-device step of the same backend in the "
             "same run. Comm alone: the step's collectives timed by themselves; comm exposed: step time minus "
             "the same step without its collectives; overlap = 1 - exposed / alone.</p>")
    return intro + html_table(HEAD, [cells(r) for r in picked],
                              [None if r.get("status") == "ok" else "bad" for r in picked])
