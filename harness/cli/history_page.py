"""`xmfu history report --store PATH -o page.html`: a history store as one page (results/history_report.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _at_least_one(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text} is out of range. Allowed: an integer >= 1")
    return int(text)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("report", help="one HTML page: every series with its regressions marked, the software "
                                      "changes between runs, the gap between platforms, coverage over time")
    p.add_argument("-o", "--output", default="history.html", help="the page to write (.html)")
    p.add_argument("--gap", nargs=2, metavar=("NUMERATOR", "DENOMINATOR"),
                   help="the two platforms or devices to compare (default: rocm cuda when the store has both)")
    p.add_argument("--window", type=_at_least_one, default=7, help="previous runs in each point's baseline")
    p.add_argument("--sigmas", type=float, default=3.0)
    p.add_argument("--min-change", type=float, default=0.02)
    return p


def run(ns: argparse.Namespace, store_of: Callable[..., Path], output_of: Callable[..., Path]) -> int:
    """`store_of` and `output_of` are the CLI's checks of --store and -o (each raises its usage error)."""
    from xmfu.harness.results import history, history_report

    out = output_of("history report", ns.output, (".html",))
    store = store_of("history report", ns.store, must_hold_runs=True)
    rows = history.load(store)
    out.write_text(history_report.build(rows, str(store), tuple(ns.gap) if ns.gap else None, ns.window, ns.sigmas,
                                        ns.min_change))
    print(f"history report: {len({r['run_id'] for r in rows})} runs, page {out}")
    return 0
