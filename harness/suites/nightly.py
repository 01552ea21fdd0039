"""After a suite run with `store=PATH` (experiment=nightly): append its bundles to the history store, judge the
series they extended with `history check`, and compare each coverage cell with the night before.

Returns the problems found, each one line; the suite exits 1 when there is any. Only a change for the worse
is a regression (a drop in TFLOP/s, bus bandwidth, tokens/s or MFU; a rise in time); a change for the better
is printed and does not fail the night.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xmfu.harness.results import coverage_history, history
from xmfu.harness.results.validator import load_bundle


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
        added = history.add(store, bundle, bundle.environment())
        run_ids.append(bundle.manifest["run_id"])
        print(f"history: {bundle.manifest['run_id']} {'added' if added else 'already in the store'}")
    return run_ids, problems


def judge(rows: Sequence[dict[str, Any]], run_ids: Sequence[str], metrics: Sequence[str]) -> list[str]:
    """Regressions in the series these runs extended, and coverage cells lost since the previous night."""
    mine = {tuple(r.get(k) for k in history.SERIES_KEY) for r in rows if r["run_id"] in set(run_ids)}
    problems = []
    for metric in metrics:
        waiting = [s for s in history.insufficient(rows, metric) if tuple(s[k] for k in history.SERIES_KEY) in mine]
        if waiting:
            print(f"history check {metric}: {len(waiting)} series with fewer than {history.MIN_RUNS} runs, not judged")
        for f in history.check(rows, metric):
            if tuple(f[k] for k in history.SERIES_KEY) not in mine:
                continue
            line = (f"{f['workload']} {f['case_id']} {f['backend']} {f['device']}: {metric} {f['latest']:.4g} vs "
                    f"baseline {f['baseline']:.4g} ({100 * f['change']:+.1f}%, limit {f['limit']:.3g})")
            if history.worse(metric, f["change"]):
                problems.append(f"REGRESSION {line}")
            else:
                print(f"improved: {line}")
    for lost in coverage_history.lost(rows, run_ids):
        problems.append(f"COVERAGE LOST {lost}")
    return problems


def append_and_check(store: Path, root: Path, metrics: Sequence[str]) -> list[str]:
    run_ids, problems = append(store, suite_bundles(root))
    if not run_ids:
        return [*problems, f"nothing appended to {store}: the suite wrote no valid bundle"]
    problems += judge(history.load(store), run_ids, metrics)
    if not problems:
        print(f"history check ({', '.join(metrics)}): no regression in the series this run extended")
    return problems
