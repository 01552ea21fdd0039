"""A series' regression as a report to file (issue 38, item 4): where its current streak began (the first bad run
and the last good one), how often its level flipped over the last 60 days, what of the toolchain changed between
the last good and the first bad run, the points, and the command that repeats the first bad run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from xmfu.harness.results.history import judge
from xmfu.harness.results.history.changes import TOOLCHAIN, repro
from xmfu.harness.results.history.stored import Stored

FLIP_DAYS = 60  # the span the flip count covers, before the latest run


@dataclass(frozen=True)
class Streak:
    key: tuple
    label: str
    metric: str
    points: list[tuple[datetime, float]]  # the series' points over the last FLIP_DAYS days (the plot's data)
    first_bad: Stored | None  # the run the current regression began at; None: the series is not in one
    last_good: Stored | None  # the run before it
    baseline: float | None  # the median the first bad run was judged against
    change: float | None  # the first bad run against it
    runs_since: int  # runs from the first bad one to the latest, both counted
    flips: int  # steps either way (judge.steps) over the last FLIP_DAYS days
    toolchain: list[tuple[str, str, str]]  # (what, last good, first bad); unknown on either side: not compared
    repro: tuple[str, str]  # (command, bundle) of the first bad run (of the latest, when there is none)


def matching(rows: Sequence[Stored], metric: str, name: str) -> list[tuple[tuple, str]]:
    """The series whose label (judge.series_label, as `history check` prints it) is `name`, or else contains it."""
    keys = list(judge.series(rows, metric))
    labels = [(k, judge.series_label(k, keys)) for k in keys]
    exact = [(k, label) for k, label in labels if label == name]
    return exact or [(k, label) for k, label in labels if name in label]


def _steps(points: Sequence[tuple[datetime, float]], metric: str) -> list[dict[str, Any]]:
    """The series' level changes: as judge.steps marks them, except that a point within the runs' own prediction
    interval (run-to-run noise, `unreliable: noisy` to `history check`) is no change and does not restart the
    baseline (judge.steps restarts it at every mark, so one noisy mark would hide a later regression)."""
    out: list[dict[str, Any]] = []
    start = 0
    for i in range(len(points)):
        if i - start < judge.MIN_RUNS - 1:
            continue
        found = judge.judge_point(points, i, judge.RULE.window, judge.RULE.sigmas, judge.RULE.min_change, start)
        spread = found.get("run_to_run") if found else None
        if found and not (spread is not None and spread["within"]):
            out.append({**found, "worse": judge.worse(metric, found["change"])})
            start = i
    return out


def _row(rows: Sequence[Stored], key: tuple, at: datetime, metric: str) -> Stored:
    return next(r for r in rows if r.key() == key and r.created == at and r.figure(metric) is not None)


def streak(rows: Sequence[Stored], key: tuple, label: str, metric: str) -> Streak:
    points = judge.series(rows, metric)[key]
    mine = _steps(points, metric)
    latest = points[-1][0]
    flips = sum(1 for s in mine if s["at"] >= latest - timedelta(days=FLIP_DAYS))
    recent = [(t, v) for t, v in points if t >= latest - timedelta(days=FLIP_DAYS)]
    last = mine[-1] if mine else None
    if last is None or not last["worse"]:  # no step, or the latest was for the better
        return Streak(key, label, metric, recent, None, None, None, None, 0, flips, [],
                      repro(_row(rows, key, latest, metric)))
    bad, good = _row(rows, key, last["at"], metric), _row(rows, key, last["previous_at"], metric)
    moved = [(w, str(a), str(b)) for w in TOOLCHAIN
             if (a := getattr(good, w)) and (b := getattr(bad, w)) and a != b]
    since = sum(1 for t, _ in points if t >= last["at"])
    return Streak(key, label, metric, recent, bad, good, last["baseline"], last["change"], since, flips, moved,
                  repro(bad))
