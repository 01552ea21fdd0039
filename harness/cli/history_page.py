"""`xmfu history report --store PATH -o page.html`: a history store as one page (results/history_report.py)."""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text} is out of range. Allowed: an integer >= 1")
    return int(text)


def _number(minimum: float, strictly: bool) -> Callable[[str], float]:
    """An argparse type: a finite number >= `minimum` (> when `strictly`); the option is named by argparse."""
    allowed = f"a finite number {'>' if strictly else '>='} {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text} is not a number. Allowed: {allowed}") from None
        if not math.isfinite(value) or value < minimum or (strictly and value == minimum):
            raise argparse.ArgumentTypeError(f"{text} is out of range. Allowed: {allowed}")
        return value

    return parse


def add_rule_options(p: argparse.ArgumentParser, window_type: Callable[[str], int]) -> None:
    """--window, --sigmas, --min-change, --detect: the rule `history check` and the page judge a point by, its defaults
    the rule's own (results/history/judge.py RULE)."""
    from xmfu.harness.results.history.judge import RULE
    from xmfu.harness.results.history.power import DETECT

    p.add_argument("--window", type=window_type, default=RULE.window, help="previous runs in each point's baseline")
    p.add_argument("--sigmas", type=_number(0, strictly=True), default=RULE.sigmas,
                   help="noise multiples a change must exceed")
    p.add_argument("--min-change", type=_number(0, strictly=False), default=RULE.min_change,
                   help="relative change a point must exceed whatever the noise")
    p.add_argument("--detect", type=_number(0, strictly=True), default=DETECT,
                   help="the relative change every series should be able to detect (0.10: 10%%); series too noisy "
                        "for it are listed")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help="one HTML page: every series with its regressions marked, the software "
                                      "changes between runs, the gap between platforms, coverage over time")
    p.add_argument("-o", "--output", default="history.html", help="the page to write (.html)")
    p.add_argument("--gap", nargs=2, metavar=("NUMERATOR", "DENOMINATOR"),
                   help="the two platforms or devices to compare (default: rocm cuda when the store has both)")
    add_rule_options(p, _at_least_one)
    return p


def run(ns: argparse.Namespace, store_of: Callable[..., Path], output_of: Callable[..., Path]) -> int:
    """`store_of` and `output_of` are the CLI's checks of --store and -o (each raises its usage error)."""
    from xmfu.harness.results.history import parquet, recorded
    from xmfu.harness.results.history.judge import RULE
    from xmfu.harness.results.render import history_report

    out = output_of("history report", ns.output, (".html",))
    store = store_of("history report", ns.store, must_hold_runs=True)
    from xmfu.harness.cli.common import write_output

    rows = parquet.load(store)
    rule = dataclasses.replace(RULE, window=ns.window, sigmas=ns.sigmas, min_change=ns.min_change, detect=ns.detect)
    page = history_report.build(rows, str(store), tuple(ns.gap) if ns.gap else None, rule,
                                recorded.notes(store, rule))
    write_output("history report", out, lambda path: path.write_text(page))
    print(f"history report: {len({r.run_id for r in rows})} runs, page {out}")
    return 0
