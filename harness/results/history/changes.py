"""What changed since the run before (issue 38, item 2), per platform and device: the toolchain and environment that
moved, the verdicts that flipped, the series gained or lost (with why a series is no longer judged), and the metrics
that moved beyond their detectable change, biggest first, each with the command that repeats it and its bundle.

A run is a suite's run (its parts share a suite_id) or one bundle outside a suite."""

from __future__ import annotations

import shlex
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from xmfu.harness.results.history import judge, power, states
from xmfu.harness.results.history.parquet import SOFTWARE
from xmfu.harness.results.history.stored import Stored

METRICS = ("tflops", "busbw_gbps")  # the nightly's `suite.check` metrics
TOOLCHAIN = (*SOFTWARE, "image_digest")


@dataclass(frozen=True)
class Run:
    id: str  # suite_id, or run_id outside a suite
    created: datetime  # its first bundle's
    rows: tuple[Stored, ...]


@dataclass(frozen=True)
class Moved:
    """A metric of one series that moved beyond its detectable change in the latest run."""

    label: str
    metric: str
    baseline: float  # the median of the runs before (judge's rule)
    latest: float
    change: float  # latest / baseline - 1
    detectable: float
    worse: bool
    repro: str  # `xmfu run ...`, or why there is none
    bundle: str  # the bundle folder the point came from, or why there is none


@dataclass(frozen=True)
class Changes:
    platform: str
    device: str
    run: Run
    since: Run
    toolchain: list[tuple[str, str, str]] = field(default_factory=list)  # (what, before, after)
    flips: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # (label, metric, before, after, why)
    gained: list[tuple[str, str]] = field(default_factory=list)  # (cell, how)
    lost: list[tuple[str, str]] = field(default_factory=list)  # (cell, why it is no longer judged)
    moved: list[Moved] = field(default_factory=list)
    too_few: int = 0  # series of the latest run with too few runs to know their detectable change


def runs(rows: Sequence[Stored]) -> dict[tuple[str, str], list[Run]]:
    """(platform, device) -> its runs, oldest first."""
    grouped: dict[tuple[str, str], dict[str, list[Stored]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        grouped[(r.platform or "", r.device)][r.suite_id or r.run_id].append(r)
    return {place: sorted((Run(i, min(r.created for r in mine), tuple(mine)) for i, mine in found.items()),
                          key=lambda run: (run.created, run.id))
            for place, found in sorted(grouped.items())}


def _stack(run: Run, what: str) -> str:
    """The run's `what` (a version, the image digest): the first its rows record; '' where none does."""
    return next((str(v) for r in run.rows if (v := getattr(r, what))), "")


def toolchain(before: Run, after: Run) -> list[tuple[str, str, str]]:
    """What moved between two runs; a version unknown on either side (an older store) is no change."""
    return [(what, old, new) for what in TOOLCHAIN
            if (old := _stack(before, what)) and (new := _stack(after, what)) and old != new]


def _cell(r: Stored) -> tuple:
    return r.workload, r.case_id, r.backend, r.device, r.dtype


def _cell_label(cell: tuple) -> str:
    return " ".join(map(str, cell))


def _judged(r: Stored) -> str:
    """'' for a row a series counts and judges; else why not (skipped, failed, contended, not validly timed)."""
    if r.status != "ok":
        return r.status
    if not r.timing_valid:
        return "not validly timed"
    return "contended" if r.contended else ""


def gained_and_lost(before: Run, after: Run) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The cells judged in one run and not in the other, with why (or 'new' / 'was skipped'...)."""
    old, new = {_cell(r): r for r in before.rows}, {_cell(r): r for r in after.rows}
    lost, gained = [], []
    for cell, r in old.items():
        if _judged(r):
            continue
        now = new.get(cell)
        why = "not run" if now is None else _judged(now) or (
            f"not comparable (comparability key {r.comparability_key} -> {now.comparability_key})"
            if now.comparability_key != r.comparability_key else "")
        if why:
            lost.append((_cell_label(cell), why))
    for cell, r in new.items():
        if not _judged(r) and (cell not in old or _judged(old[cell])):
            gained.append((_cell_label(cell), "new" if cell not in old else f"was {_judged(old[cell])}"))
    return gained, lost


def _upto(rows: Sequence[Stored], run: Run) -> list[Stored]:
    """The store as it was once `run` was in it."""
    last = max(r.created for r in run.rows)
    return [r for r in rows if r.created <= last]


def flips(rows: Sequence[Stored], before: Run, after: Run, metrics: Sequence[str]) -> list[tuple[str, ...]]:
    """Series of the latest run whose state (results/history/states.py) differs from the one they had at `before`."""
    out = []
    mine = {r.key() for r in after.rows}
    for metric in metrics:
        then_rows, now_rows = _upto(rows, before), _upto(rows, after)
        then = {s.key: s for s in states.states(then_rows, metric, judge.check(then_rows, metric))}
        now = [s for s in states.states(now_rows, metric, judge.check(now_rows, metric)) if s.key in mine]
        keys = [s.key for s in now]
        for s in now:
            old = then.get(s.key)
            if old is not None and old.state != s.state:
                out.append((judge.series_label(s.key, keys), metric, old.state, s.state, s.why))
    return out


def repro(r: Stored) -> tuple[str, str]:
    """(the command that repeats the row's run: `xmfu run` and its overrides, its bundle folder), or why either
    is not known."""
    if r.overrides is None:
        command = "not recorded (stored before the overrides column)"
    else:  # the run's own run_id= left out: a repeat is a run of its own (the same id would name the same folder)
        kept = [o for o in shlex.split(r.overrides) if not o.startswith("run_id=")]
        command = f"xmfu run {shlex.join(kept)}".rstrip()
    if r.bundle is None:
        return command, "not recorded (stored before the bundle column)"
    return command, r.bundle or "not kept (added from an archive)"


def moved(rows: Sequence[Stored], after: Run, metrics: Sequence[str]) -> tuple[list[Moved], int]:
    """The latest run's points beyond their series' detectable change (power.py), biggest first; and how many of
    its series have too few runs to know one."""
    now_rows = _upto(rows, after)
    out, too_few = [], 0
    mine = {r.key(): r for r in after.rows}
    for metric in metrics:
        found = {k: v for k, v in judge.series(now_rows, metric).items() if k in mine}
        keys = list(found)
        for key, points in found.items():
            row = mine[key]
            if len(points) < judge.MIN_RUNS or row.figure(metric) is None or points[-1][0] != row.created:
                too_few += len(points) < judge.MIN_RUNS
                continue
            before = [v for _, v in points[-1 - judge.RULE.window:-1]]
            rule, interval = power.detectable(before, metric)
            base = statistics.median(before)
            if rule is None or interval is None or not base:  # a value <= 0: no detectable change to hold it to
                continue
            change, bound = points[-1][1] / base - 1, max(rule, interval)
            if abs(change) > bound:
                out.append(Moved(judge.series_label(key, keys), metric, base, points[-1][1], change, bound,
                                 judge.worse(metric, change), *repro(row)))
    return sorted(out, key=lambda m: -abs(m.change)), too_few


def changes(rows: Sequence[Stored], since: str | None = None, metrics: Sequence[str] = METRICS) -> list[Changes]:
    """Per platform and device with at least two runs: the latest run against the one before, or against run
    `since` (a run or suite id; only the places that have it)."""
    out = []
    for (platform, device), found in runs(rows).items():
        latest = found[-1]
        if since is not None:
            before = next((r for r in found if r.id == since or any(x.run_id == since for x in r.rows)), None)
        else:
            before = found[-2] if len(found) > 1 else None
        if before is None or before is latest:
            continue
        gained, lost = gained_and_lost(before, latest)
        points, too_few = moved(rows, latest, metrics)
        out.append(Changes(platform, device, latest, before, toolchain(before, latest),
                           flips(rows, before, latest, metrics), gained, lost, points, too_few))
    return out
