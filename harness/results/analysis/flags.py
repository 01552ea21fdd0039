"""A row's quality flags: the marks a bundle row carries that say its figure is not what it seems.

One place names them, from the row record (harness/results/schema/row.py); every surface that shows a row's
figure shows them beside it: the end table (table.py), the HTML report (report.py), a suite's verdict page
(suite_report.py), the history store (history/parquet.py) and `xmfu history check` (cli/history.py).

The flags, in the order they are shown, and the row fields they are read from:
- `contended`: `contention.contended`, the run's own reading of other processes on the CPU or GPU during the
  case (harness/machine/contention.py);
- `timing not valid`: `timing_valid` false on a row that was timed: the time does not represent the hardware
  (Triton's interpreter on a CPU), `timing_note` says why;
- `CI missed`: `timer.ci_target_met` false: sampling stopped (time budget, max samples) before the median's 95% CI
  was as narrow as asked (harness/engine/sampler.py);
- `launch-bound`: `timer.launch_bound` true: issuing a call took >= 90% of its measured time, so the figure is
  host launch overhead, not the device (harness/engine/runner.py);
- `not steady`: `steady_state.reached` false: a sustained run whose windows never settled (harness/engine/steady.py);
- `MFU above 1`: `mfu` > 1: the peak is an underestimate or the FLOP count too high (harness/engine/metrics.py);
- `non-finite`: `non_finite_fields`: figures a backend returned as NaN or infinity, kept as null (writer.py);
- `scaling above 1`: `scaling_credible` false: a distributed step's scaling efficiency above 100%, which no
  parallel strategy can reach (workloads/transformer/figures.py says why in `scaling_note`);
- `method unmatched`: `mfu_vs_achievable` divides a row timed one way (`timer.flush_l2_bytes` a byte count:
  flushed, else warm) by an achievable figure measured another (`achievable_method`), or measured by a method not
  stated: not a like-for-like fraction (issue 42 item 2: warm rows of a CPU read 3x a flushed sweep's best);
- `above achievable`: `mfu_vs_achievable` > 1: the row beat the figure that is meant to be the most its device
  achieves. The row's `mfu_vs_achievable_reason` states both (harness/results/schema/achievable.py), and the end
  table never prints such a fraction as a plain percentage.

`contended` makes a figure no evidence at all (UNJUDGED): a verdict resting on such a row is NOT JUDGED, never a
pass. `timing not valid` is set only by design (a backend that is checked but never timed on this device: Triton's
interpreter on a CPU), so its row is a caveat: the run's verdict rests on the rows that were timed (and a run with
none is NOT JUDGED, harness/suites/judgement.py). The others are caveats a reader must see, and a verdict names
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.schema import achievable
from xmfu.harness.results.schema.row import Row

ORDER = ("contended", "timing not valid", "CI missed", "launch-bound", "not steady", "MFU above 1", "non-finite",
         "scaling above 1", "method unmatched", "above achievable")
# Flags that make a row's figure no evidence either way (a verdict over such rows is NOT JUDGED).
UNJUDGED = ORDER[:1]
ACHIEVABLE_FLAGS = (achievable.UNMATCHED, achievable.ABOVE)  # what makes mfu_vs_achievable no plain fraction


@dataclass(frozen=True)
class Flag:
    """One flag of a row: its short name (shown in tables) and why, from the row's own fields."""

    name: str
    why: str


def flags_of(row: Row | Mapping[str, Any]) -> list[Flag]:
    """The row's flags with their reasons, in the order the module docstring lists them; [] for a clean row."""
    row = _record(row)
    timer, contention, steady = row.timer, row.contention, row.steady_state
    found = []
    if contention is not None and contention.contended:
        found.append(Flag("contended", str(contention.reason or "other work during the case")))
    if row.status == "ok" and not row.timing_valid:
        found.append(Flag("timing not valid", str(row.timing_note or "the time does not represent the hardware")))
    if timer is not None and timer.ci_target_met is False:
        found.append(Flag("CI missed", str(timer.stop or "the CI target was not reached")))
    if timer is not None and timer.launch_bound:
        host = timer.host_launch_s
        found.append(Flag("launch-bound", "issuing a call took >= 90% of its time"
                          + (f" ({1e6 * host:.3g} us per call)" if host is not None else "")))
    if steady is not None and steady.reached is False:
        found.append(Flag("not steady", "no steady state was reached before the last window"))
    if row.mfu is not None and row.mfu > 1:
        found.append(Flag("MFU above 1", str(row.mfu_reason or "the peak or the FLOP count is wrong")))
    if row.non_finite_fields:
        found.append(Flag("non-finite", "NaN or infinity from the backend: " + ", ".join(row.non_finite_fields)))
    if scaling_not_credible(row):
        found.append(Flag("scaling above 1", str(row.scaling_note or "scaling efficiency above 100%")))
    timed = achievable.timed_method(timer.flush_l2_bytes if timer else None, timer is not None)
    return found + [Flag(name, why) for name, why in achievable.caveats(row.mfu_vs_achievable, timed,
                                                                        row.achievable_method)]


def scaling_not_credible(row: Row | Mapping[str, Any]) -> bool:
    """A scaling efficiency above 1: flagged by the row (`scaling_credible` false) or, in a bundle written before
    that field, by its value."""
    row = _record(row)
    efficiency = row.scaling_efficiency
    return row.scaling_credible is False or (efficiency is not None and efficiency > 1)


def _record(row: Row | Mapping[str, Any]) -> Row:
    return row if isinstance(row, Row) else typed(row)


def row_flags(row: Row | Mapping[str, Any]) -> list[str]:
    """The names of the row's flags (e.g. ['contended', 'CI missed']); [] for a clean row."""
    return [f.name for f in flags_of(row)]


def flags_text(row: Row | Mapping[str, Any]) -> str:
    """The row's flag names joined for a table cell ('' for a clean row)."""
    return ", ".join(row_flags(row))


def unjudged(row: Row | Mapping[str, Any]) -> list[str]:
    """The row's flags that make its figure no evidence (contended)."""
    return [name for name in row_flags(row) if name in UNJUDGED]


def tally(rows: Iterable[Row | Mapping[str, Any]]) -> dict[str, int]:
    """Flag name -> how many of `rows` carry it, in the flags' own order (absent flags left out)."""
    counts: dict[str, int] = {}
    for row in rows:
        for name in row_flags(row):
            counts[name] = counts.get(name, 0) + 1
    return {name: counts[name] for name in ORDER if name in counts}


def summary(rows: Iterable[Row | Mapping[str, Any]]) -> str:
    """'3 of 10 rows flagged: contended 2, CI missed 1'; '' when no row carries a flag."""
    rows = list(rows)
    counts = tally(rows)
    if not counts:
        return ""
    flagged = sum(1 for r in rows if row_flags(r))
    return (f"{flagged} of {len(rows)} rows flagged: "
            + ", ".join(f"{name} {n}" for name, n in counts.items()))
