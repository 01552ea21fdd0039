"""One point per case when a plot holds the same case from several runs (a report over a year of nightly bundles).

A report over 200 nightly bundles of one 24-case sweep holds each case 200 times. Drawn row by row, the MFU
figure showed its first 60 of 4,800 bars (the same few cases, run after run), the throughput figure its first 20
of 400 run-split lines, and the roofline 4,800 overlapping markers; drawing them was most of the report's time
(issue 30, item 14). Here the rows of one case (same workload, comparability key, backend, device, device index,
rank count, phase, dtype, params and peak) from different runs become one point:
- the point is the median across the runs of the rows' TFLOP/s (MFU: that median / the rows' peak, which the key
  holds equal); a row's own figure is its run's median time, so this is the median of the runs' medians;
- the whiskers span the lowest to the highest bound of the rows' 95% CIs (`tflops_ci95`): the range across the
  runs, widened by each run's own uncertainty; for a case of one run they are its CI, as before;
- a merged point's flags are counted over its rows ("CI missed 3/200").
Each figure's note says how many points are merged, and the table under the plots keeps every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any

from xmfu.harness.results.analysis import flags, grouping
from xmfu.harness.results.analysis.grouping import Row

MERGED = "merged_runs"  # key of a merged point: how many rows (runs) it stands for
MERGED_FLAGS = "merged_flags"  # key of a merged point: its rows' flags, counted


def case_key(r: Row) -> tuple[Any, ...]:
    """What makes two rows the same case measured the same way (only their run differs)."""
    return (r.get("workload"), r.get("comparability_key"), r.get("backend"), r.get("device"), r.get("device_index"),
            repr(grouping.ranks(r)), r.get("phase"), r.get("dtype"), repr(sorted((r.get("params") or {}).items())),
            r.get("peak_tflops"))


def merge(rows: Sequence[Row]) -> tuple[list[Row], str]:
    """The rows with each case measured in several runs replaced by one point (see the module docstring), in the
    order of each case's first row; and the sentence a figure's note says ('' when no case was merged)."""
    parts = grouping.group(rows, case_key)
    if len(parts) == len(rows):
        return list(rows), ""
    out = [part[0] if len(part) == 1 else _point(part) for part in parts.values()]
    merged = [part for part in parts.values() if len(part) > 1]
    sentence = (f"{len(merged)} points are each the median of one case across {_runs(merged)} runs "
                f"({sum(map(len, merged))} rows); their whiskers span the runs' 95% CIs")
    return out, sentence


def _runs(parts: list[list[Row]]) -> str:
    low, high = min(map(len, parts)), max(map(len, parts))
    return str(low) if low == high else f"{low} to {high}"


def _point(part: list[Row]) -> Row:
    tflops = median(r["tflops"] for r in part)
    lows = [(r.get("tflops_ci95") or [r["tflops"]] * 2)[0] for r in part]
    highs = [(r.get("tflops_ci95") or [r["tflops"]] * 2)[1] for r in part]
    peak = part[0].get("peak_tflops")
    counted = flags.tally(part)
    return {**part[0], "run_id": f"{len(part)} runs", "tflops": tflops, "tflops_ci95": [min(lows), max(highs)],
            "mfu": tflops / peak if peak and part[0].get("mfu") is not None else None, MERGED: len(part),
            MERGED_FLAGS: ", ".join(f"{name} {n}/{len(part)}" for name, n in counted.items())}


def flags_text(r: Row) -> str:
    """A point's flags as a figure shows them beside it: a row's own, or a merged point's counts."""
    return r[MERGED_FLAGS] if MERGED in r else flags.flags_text(r)
