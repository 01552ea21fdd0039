"""After a suite run with `store=PATH` (experiment=nightly): append its bundles to the history store, judge the
series they extended with `history check`, and compare each coverage cell with the night before.

Returns the problems found, each one line; the suite exits 1 when there is any. Only a change for the worse
is a regression (a drop in TFLOP/s, bus bandwidth, tokens/s or MFU; a rise in time); a change for the better
is printed and does not fail the night. A change for the worse on a row whose own evidence says its timing is
not to be trusted (the run marked it contended, or its CI or CV is as wide as the change), or that lies within
the run-to-run spread of the series' baseline runs (series_judge.unreliable, series_judge.run_to_run), is listed as
`unreliable: contended` / `unreliable: noisy` with its figures, and fails the night only under
`suite.strict=true`: a nightly job must not page anyone for noise its own bundle or history recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.history import coverage_history, parquet, power, recorded, states
from xmfu.harness.results.history import judge as series_judge
from xmfu.harness.results.history.states import SeriesState
from xmfu.harness.results.history.stored import Stored


def suite_bundles(root: Path) -> list[Path]:
    """Every bundle under a suite's folder (its hosts' folders included), in a stable order."""
    return sorted(p.parent for p in root.rglob("manifest.json"))


def append(store: Path, folders: Sequence[Path]) -> tuple[list[str], list[str]]:
    """(run ids appended or already there, problems): invalid bundles are named and left out."""
    run_ids, problems = [], []
    for folder in folders:
        loaded = load_bundle(folder)
        if loaded.problems or loaded.bundle is None:
            problems.append(f"{folder}: not appended, not a valid bundle ({(loaded.problems or ['unreadable'])[0]})")
            continue
        bundle = loaded.bundle
        try:
            added = parquet.add(store, bundle, bundle.environment())
        except (OSError, ValueError) as exc:  # a disk that filled during the suite; ValueError: parquet.StoreError
            problems.append(f"{folder}: not appended to {store} ({exc})")
            continue
        run_ids.append(bundle.manifest["run_id"])
        print(f"history: {bundle.manifest['run_id']} {'added' if added else 'already in the store'}")
    return run_ids, problems


class Judged(NamedTuple):
    problems: list[str]  # each fails the night
    unreliable: list[str]  # changes for the worse that the rows' own evidence discounts (fail only when strict)
    states: tuple[SeriesState, ...] = ()  # each series this run extended, every metric
    record: recorded.Recorded | None = None  # the judgement as written into the store (and suite.json)


def judge(rows: Sequence[Stored], run_ids: Sequence[str], metrics: Sequence[str], strict: bool = False) -> Judged:
    """Regressions in the series these runs extended, and coverage cells lost since the previous night."""
    mine = {r.key() for r in rows if r.run_id in set(run_ids)}
    out = Judged([], [])
    found: list[SeriesState] = []
    for metric in metrics:
        waiting = [s for s in series_judge.insufficient(rows, metric)
                   if tuple(s[k] for k in parquet.SERIES_KEY) in mine]
        if waiting:
            print(f"history check {metric}: {len(waiting)} series with fewer than {series_judge.MIN_RUNS} runs, "
                  "not judged")
        judged = len(mine & set(series_judge.series(rows, metric))) - len(waiting)
        print(f"history check {metric}: {judged} series judged")
        _print_power(rows, metric, mine, len(waiting))
        flagged = series_judge.check(rows, metric)
        tonight = [s for s in states.states(rows, metric, flagged, strict) if s.key in mine]
        if tonight:
            print(f"history check {metric}: {states.night(tonight)} ({states.counts(tonight)})")
        found += tonight
        for f in flagged:
            if tuple(f[k] for k in parquet.SERIES_KEY) not in mine:
                continue
            line = series_judge.describe(f)
            if not series_judge.worse(metric, f["change"]):
                print(f"improved: {line}")
            elif f.get("unreliable") and not strict:
                out.unreliable.append(f"unreliable: {f['unreliable']} {line}")
            else:
                out.problems.append(f"REGRESSION {line}")
    for lost in coverage_history.lost(rows, run_ids):
        out.problems.append(f"COVERAGE LOST {lost}")
    return out._replace(states=tuple(found))


def _print_power(rows: Sequence[Stored], metric: str, mine: set[tuple], too_few: int) -> None:
    """What the gate could see tonight (history/power.py): the series too noisy for a 10% change, and the count."""
    found = [p for p in power.powers(rows, metric) if p.key in mine]
    keys = [p.key for p in found]
    for p in found:
        if not p.can_detect(power.DETECT):
            print(f"history check {metric}: {series_judge.series_label(p.key, keys)} {p.text()}; cannot detect a "
                  f"{100 * power.DETECT:g}% change (run-to-run noise)")
    if found or too_few:
        print(f"history check {metric}: {power.summary(found, too_few).line()}")


def append_and_check(store: Path, root: Path, metrics: Sequence[str], strict: bool = False) -> Judged:
    run_ids, problems = append(store, suite_bundles(root))
    if not run_ids:
        return Judged([*problems, f"nothing appended to {store}: the suite wrote no valid bundle"], [])
    try:
        rows = parquet.load(store)
    except (OSError, ValueError) as exc:  # ValueError: parquet.StoreError, a file that went bad during the suite
        return Judged([*problems, f"the store {store} could not be read to judge this run ({exc})"], [])
    judged = judge(rows, run_ids, metrics, strict)
    judged.problems[:0] = problems
    record = recorded.made(root.name, run_ids, series_judge.RULE, judged.states)
    try:  # the judgement as made, under the rule it was made by (results/history/recorded.py)
        recorded.write(store, record)
    except (OSError, ValueError) as exc:
        judged.problems.append(f"the judgement could not be recorded in {store} ({exc})")
    judged = judged._replace(record=record)
    for line in judged.unreliable:
        print(line)
    if not judged.problems:
        extra = f"; {len(judged.unreliable)} unreliable (not judged; suite.strict=true judges them)" \
            if judged.unreliable else ""
        print(f"history check ({', '.join(metrics)}): no regression in the series this run extended{extra}")
    return judged
