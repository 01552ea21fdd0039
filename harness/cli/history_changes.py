"""`xmfu history changes --store PATH [--since RUN] [--format markdown|json]`: what changed since the run before
(results/history/changes.py), as markdown to paste or JSON to read."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmfu.harness.cli.common import UsageFailure

if TYPE_CHECKING:
    from xmfu.harness.results.history.changes import Changes


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("changes", help="what changed since the run before: toolchain, verdicts, series gained or "
                                       "lost, metrics moved beyond their detectable change (with a repro command)")
    p.add_argument("--since", metavar="RUN", help="compare the latest run with this run (a run id or a suite id) "
                                                  "instead of the one before it")
    p.add_argument("--format", choices=("markdown", "json"), default="markdown")
    return p


def run(ns: argparse.Namespace, store_of: Callable[..., Path]) -> int:
    from xmfu.harness.results.history import changes, parquet

    rows = parquet.load(store_of("history changes", ns.store, must_hold_runs=True))
    if ns.since is not None and not any(ns.since in (r.run_id, r.suite_id) for r in rows):
        latest = max(rows, key=lambda r: r.created)
        raise UsageFailure(f"history changes: --since {ns.since} is no run of the store {ns.store}. Allowed: a run id "
                           f"or a suite id the store holds (its latest: {latest.suite_id or latest.run_id})")
    found = changes.changes(rows, ns.since)
    if ns.format == "json":
        print(json.dumps({"places": [_as_json(c) for c in found]}, indent=1, default=str))
    elif not found:
        print("nothing to compare: each platform and device in the store has one run")
    else:
        print("\n\n".join(markdown(c) for c in found))
    return 0


def _as_json(c: Changes) -> dict[str, Any]:
    return {"platform": c.platform, "device": c.device,
            "run": {"id": c.run.id, "created": c.run.created.isoformat()},
            "since": {"id": c.since.id, "created": c.since.created.isoformat()},
            "toolchain": [{"what": w, "before": b, "after": a} for w, b, a in c.toolchain],
            "flips": [dict(zip(("series", "metric", "before", "after", "why"), f, strict=True)) for f in c.flips],
            "gained": [{"cell": cell, "how": how} for cell, how in c.gained],
            "lost": [{"cell": cell, "why": why} for cell, why in c.lost],
            "moved": [dataclasses.asdict(m) for m in c.moved], "too_few_runs": c.too_few}


def _cell(text: str) -> str:
    """Text for a markdown table cell: pipes escaped."""
    return text.replace("|", "\\|")


def markdown(c: Changes) -> str:
    """One platform and device's changes as a markdown section, in the issue's order."""
    out = [f"## What changed on {c.platform} {c.device}: run {c.run.id} ({c.run.created:%Y-%m-%d %H:%M} UTC) since "
           f"{c.since.id} ({c.since.created:%Y-%m-%d %H:%M} UTC)", "", "### Toolchain and environment", ""]
    out += [f"- {w}: {b} -> {a}" for w, b, a in c.toolchain] or ["- none moved (a version either run did not "
                                                                   "record is not compared)"]
    out += ["", "### Verdicts that flipped", ""]
    out += [f"- {label} {metric}: {b} -> {a}" + (f" ({why})" if why else "") for label, metric, b, a, why in c.flips] \
        or ["- none"]
    out += ["", "### Series gained or lost", ""]
    out += [*(f"- lost: {cell} ({why})" for cell, why in c.lost),
            *(f"- gained: {cell} ({how})" for cell, how in c.gained)] or ["- none"]
    out += ["", "### Metrics moved beyond their detectable change, biggest first", ""]
    if c.moved:
        out += ["| series | metric | baseline | latest | change | detectable | repro | bundle |", "|---" * 8 + "|"]
        out += [f"| {_cell(m.label)} | {m.metric} | {m.baseline:.4g} | {m.latest:.4g} | {100 * m.change:+.1f}%"
                f"{' (worse)' if m.worse else ''} | {100 * m.detectable:.1f}% | `{_cell(m.repro)}` | "
                f"{_cell(m.bundle)} |" for m in c.moved]
    else:
        out += ["- none"]
    if c.too_few:
        out += ["", f"{c.too_few} series of this run have too few runs to know their detectable change."]
    return "\n".join(out)
