"""`xmfu history check --store PATH`: the latest run of every series judged against the noise of the runs before it,
each series in a state a CI can act on (results/history/states.py), what each series can detect
(results/history/power.py), and the rule it was judged by, named where the store recorded judgements under another
(results/history/recorded.py). Text, or `--format json`."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmfu.harness.cli.common import UsageFailure

if TYPE_CHECKING:
    from xmfu.harness.results.history.judge import Rule
    from xmfu.harness.results.history.power import Power
    from xmfu.harness.results.history.states import SeriesState
    from xmfu.harness.results.history.stored import Stored


def add_parser(sub: Any, metrics: Sequence[str], rule_options: Callable[..., None]) -> argparse.ArgumentParser:
    from xmfu.harness.results.history.states import EXIT_ON

    p = sub.add_parser("check", help="each series' state (failure, regression, not_judged, insufficient_data, "
                                     "no_regression); exit 1 on a regression, 4 on a failure")
    p.add_argument("--metric", default="tflops", choices=sorted(metrics))
    rule_options(p, int)
    p.add_argument("--strict", action="store_true",
                   help="exit 1 also for changes on rows marked contended or noisy (listed as UNRELIABLE)")
    p.add_argument("--exit-on", default=",".join(EXIT_ON),
                   help="the states that fail the command, comma-separated (failure 4, regression 1, not_judged 3, "
                        "insufficient_data 5; the worst held decides), or none")
    p.add_argument("--format", choices=("text", "json"), default="text")
    return p


@dataclasses.dataclass(frozen=True)
class Checked:
    """One `history check`: what was judged, by which rule, and what came of it."""

    rule: Rule
    store: Path
    rows: list[Stored]
    flagged: list[dict[str, Any]]
    states: list[SeriesState]
    powers: list[Power]
    exit_on: tuple[str, ...]
    status: int


def run(ns: argparse.Namespace, store_of: Callable[..., Path]) -> int:
    from xmfu.harness.results.history import judge, parquet, power, states

    if ns.window < 1:
        raise UsageFailure(f"history check: --window {ns.window} is out of range. Allowed: an integer >= 1 "
                           "(the number of previous runs in the baseline)")
    try:
        exit_on = states.parse_exit_on(ns.exit_on)
    except ValueError as exc:
        raise UsageFailure(f"history check: --exit-on {exc}") from None
    store = store_of("history check", ns.store, must_hold_runs=True)
    rows = parquet.load(store)
    rule = dataclasses.replace(judge.RULE, window=ns.window, sigmas=ns.sigmas, min_change=ns.min_change,
                               detect=ns.detect)
    flagged = judge.check(rows, ns.metric, rule.window, rule.sigmas, rule.min_change)
    found = states.states(rows, ns.metric, flagged, ns.strict)
    done = Checked(rule, store, rows, flagged, found, power.powers(rows, ns.metric, rule.window, rule.sigmas,
                                                                   rule.min_change),
                   exit_on, states.exit_status(found, exit_on))
    (_json if ns.format == "json" else _text)(done, ns)
    return done.status


def _text(done: Checked, ns: argparse.Namespace) -> None:
    from xmfu.harness.results.history import judge, power, recorded, states
    from xmfu.harness.results.history.stored import SERIES_KEY

    rows, metric, keys = done.rows, ns.metric, list(judge.series(done.rows, ns.metric))
    print(f"rule: {done.rule.text()}")
    for note in recorded.notes(done.store, done.rule):
        print(f"NOTE: {note}")
    for s in judge.insufficient(rows, metric):
        print(f"{judge.series_label(tuple(s[k] for k in SERIES_KEY), keys)}: insufficient history ({s['runs']} of "
              f"{s['minimum']})")
    for f in done.flagged:  # a change its own row discounts (contended, noisy) is listed, and fails only with --strict
        print(f"{'UNRELIABLE' if f.get('unreliable') and not ns.strict else 'CHANGED'} {judge.describe(f)}")
    for key, said in judge.flagged_within_noise(rows, metric, done.flagged):  # "no change" with its row's flags
        print(f"FLAGGED {judge.series_label(key, keys)}: within the noise; the latest run's row: {said}")
    if not done.flagged:
        print(f"no change in {metric} beyond the noise")
    for p in done.powers:
        cannot = "" if p.can_detect(ns.detect) else f"; cannot detect a {100 * ns.detect:g}% change (run-to-run noise)"
        print(f"{judge.series_label(p.key, keys)} {metric}: {p.text()}{cannot}")
    print(power.summary(done.powers, len(judge.insufficient(rows, metric)), ns.detect).line())
    listed = {tuple(f[k] for k in SERIES_KEY) for f in done.flagged}  # listed above with why
    for s in done.states:
        if s.state in (states.FAILURE, states.NOT_JUDGED) and s.key not in listed:
            print(f"{s.state.upper().replace('_', ' ')} {judge.series_label(s.key, keys)}: {s.why}")
    print(f"night: {states.night(done.states)} ({states.counts(done.states) or 'no series'}); exit {done.status} "
          f"(--exit-on {','.join(done.exit_on) or 'none'})")


def _json(done: Checked, ns: argparse.Namespace) -> None:
    """The judgement as one JSON object: the rule, the night, the exit status, and each series with its state and
    detectable change (null: not judged, or not measured)."""
    from xmfu.harness.results.history import judge, power, recorded, states

    keys = [s.key for s in done.states]
    powers = {p.key: p for p in done.powers}
    series = []
    for s in done.states:
        p = powers.get(s.key)
        series.append({**s.as_dict(), "label": judge.series_label(s.key, keys),
                       "detectable": p.detectable if p else None, "rule_bound": p.rule_bound if p else None,
                       "interval_bound": p.interval_bound if p else None,
                       "can_detect": p.can_detect(ns.detect) if p else None})
    too_few = len(judge.insufficient(done.rows, ns.metric))
    print(json.dumps({"metric": ns.metric, "rule": dataclasses.asdict(done.rule), "night": states.night(done.states),
                      "exit_status": done.status, "exit_on": list(done.exit_on),
                      "summary": power.summary(done.powers, too_few, ns.detect).line(),
                      "notes": recorded.notes(done.store, done.rule), "series": series}, indent=1))
