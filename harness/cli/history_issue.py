"""`xmfu history issue --store PATH SERIES`: a markdown body to file for one series' regression
(results/history/streak.py): the streak, the toolchain between the last good and the first bad run, the points
and the repro command."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmfu.harness.cli.common import UsageFailure

if TYPE_CHECKING:
    from xmfu.harness.results.history.stored import Stored
    from xmfu.harness.results.history.streak import Streak

SHOWN = 5  # series named when SERIES matches several


def add_parser(sub: Any, metrics: Sequence[str]) -> argparse.ArgumentParser:
    p = sub.add_parser("issue", help="a markdown body to file for one series' regression: streak, toolchain diff, "
                                     "points, repro command")
    p.add_argument("series", help="the series as `history check` prints it (or a part of that naming one series)")
    p.add_argument("--metric", default="tflops", choices=sorted(metrics))
    return p


def run(ns: argparse.Namespace, store_of: Callable[..., Path]) -> int:
    from xmfu.harness.results.history import parquet, streak

    rows = parquet.load(store_of("history issue", ns.store, must_hold_runs=True))
    found = streak.matching(rows, ns.metric, ns.series)
    if len(found) != 1:
        named = "; ".join(label for _, label in found[:SHOWN]) + (f"; and {len(found) - SHOWN} more"
                                                                 if len(found) > SHOWN else "")
        what = f"matches {len(found)} series ({named})" if found else "matches no series with ok, validly timed " \
            f"{ns.metric} rows"
        raise UsageFailure(f"history issue: {ns.series!r} {what} in the store {ns.store}. Allowed: one series as "
                           "`xmfu history check` prints it, or a part of that naming only one")
    (key, label), = found
    print(markdown(streak.streak(rows, key, label, ns.metric), rows))
    return 0


def _when(r: Stored) -> str:
    return f"{r.run_id} ({r.created:%Y-%m-%d %H:%M} UTC)"


def markdown(s: Streak, rows: Sequence[Stored]) -> str:
    from xmfu.harness.results.history.judge import RULE

    value = lambda r: f"{r.figure(s.metric):.4g}"  # noqa: E731
    if s.first_bad is None or s.last_good is None or s.change is None:
        latest = max((r for r in rows if r.key() == s.key), key=lambda r: r.created)
        head = [f"# {s.label} {s.metric}: no regression now", "",
                f"No step for the worse beyond the noise is the series' latest ({s.flips} flips over the last 60 "
                "days)." + ("" if latest.status == "ok" else f" Its latest row is {latest.status}: "
                            f"{_when(latest)}.")]
    else:
        head = [f"# Regression: {s.label} {s.metric} {100 * s.change:+.1f}% since "
                f"{s.first_bad.created:%Y-%m-%d}", "",
                f"- First bad run: {_when(s.first_bad)}, {s.metric} {value(s.first_bad)} against the baseline "
                f"{s.baseline:.4g} (the median of the runs before)",
                f"- Last good run: {_when(s.last_good)}, {s.metric} {value(s.last_good)}",
                f"- Runs since the first bad one, both counted: {s.runs_since}",
                f"- Flips over the last 60 days (level changes beyond the noise, either way): {s.flips}",
                f"- Judged by: {RULE.text()}", "",
                "## Toolchain between the last good and the first bad run", ""]
        head += [f"- {w}: {a} -> {b}" for w, a, b in s.toolchain] or ["- none moved (a version either run did not "
                                                                       "record is not compared)"]
    bad_at = s.first_bad.created if s.first_bad else None
    good_at = s.last_good.created if s.last_good else None
    runs = {(r.created, r.figure(s.metric)): r.run_id for r in rows if r.key() == s.key}
    table = ["| when (UTC) | run | " + s.metric + " | |", "|---|---|---|---|"]
    table += [f"| {t:%Y-%m-%d %H:%M} | {runs.get((t, v), '')} | {v:.4g} | "
              f"{'first bad' if t == bad_at else 'last good' if t == good_at else ''} |" for t, v in s.points]
    return "\n".join([*head, "", "## Repro", "", "```sh", s.repro[0], "```", "", f"Bundle: {s.repro[1]}", "",
                      "## The points (the last 60 days)", "", *table])
