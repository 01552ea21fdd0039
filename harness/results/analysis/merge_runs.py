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

from msgspec import structs

from xmfu.harness.results.analysis import flags, grouping
from xmfu.harness.results.schema.row import Row


class Point(Row, kw_only=True):
    """A case measured in several runs, drawn as one point: the first run's row with the merged figures, and what
    only a merged point has. A Row, so every plot reads it as it reads a row."""

    merged_runs: int  # how many rows (runs) it stands for
    merged_flags: str  # its rows' flags, counted ("CI missed 3/200")


def case_key(r: Row) -> tuple[Any, ...]:
    """What makes two rows the same case measured the same way (only their run differs)."""
    return (r.workload, r.comparability_key, r.backend, r.device, r.device_index, repr(grouping.ranks(r)), r.phase,
            r.dtype, repr(sorted(r.params.items())), r.peak_tflops)


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


def _ci(r: Row) -> list[float]:
    """The row's TFLOP/s CI, or its figure at both ends where it has none."""
    return r.tflops_ci95 or [r.tflops, r.tflops]


def _point(part: list[Row]) -> Point:
    first = part[0]
    tflops = median(r.tflops for r in part)
    peak = first.peak_tflops
    counted = ", ".join(f"{name} {n}/{len(part)}" for name, n in flags.tally(part).items())
    # the run id says how many runs (a point is no one run's row); a record is not validated as it is made
    return Point(**{**structs.asdict(first), "run_id": f"{len(part)} runs", "tflops": tflops,
                    "tflops_ci95": [min(_ci(r)[0] for r in part), max(_ci(r)[1] for r in part)],
                    "mfu": tflops / peak if peak and first.mfu is not None else None},
                 merged_runs=len(part), merged_flags=counted)


def flags_text(r: Row) -> str:
    """A point's flags as a figure shows them beside it: a row's own, or a merged point's counts."""
    return r.merged_flags if isinstance(r, Point) else flags.flags_text(r)
