"""`xmfu history`: add bundles to a Parquet store, plot a metric (or the gap between two platforms) over time,
check the latest run against the noise of the previous ones, and write the history report page."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmfu.harness.cli.common import (
    Parser,
    UsageFailure,
    gathered_bundles,
    output_path,
    usage_error,
    writable_folder,
    write_output,
)

if TYPE_CHECKING:  # the store's record; the history modules are imported when a history command runs
    from xmfu.harness.results.history.stored import Stored


def store_path(command: str, path: str, must_hold_runs: bool) -> Path:
    """The history folder `--store` names; `must_hold_runs`: it must exist and hold runs."""
    from xmfu.harness.results.history import parquet

    store = Path(path)
    if store.exists() and not store.is_dir():
        raise UsageFailure(f"{command}: --store {path} is a file, not a folder of Parquet files")
    if must_hold_runs:
        try:
            parquet.check_store(store)
        except parquet.StoreError as exc:
            raise UsageFailure(f"{command}: {exc}") from None
    return store


def _history_add(ns: argparse.Namespace) -> int:
    from xmfu.harness.results.history import parquet

    store = store_path("history add", ns.store, must_hold_runs=False)
    writable_folder("history add", "--store", ns.store)  # a read-only store is refused before any bundle is read
    # every bundle is validated before the first is added: a glob that catches an invalid one adds nothing
    bundles = gathered_bundles("history add", ns.bundles)
    try:
        parquet.upgrade(store)  # once per command, not once per bundle (parquet.add's docstring)
    except ValueError as exc:  # a store file that is not Parquet
        raise UsageFailure(f"history add: {store}: {exc}") from None
    except OSError as exc:  # the store's folder or lock cannot be made (it went read-only since the check above)
        print(f"xmfu: history add: the store {store} cannot be written ({exc.strerror or exc}); nothing was added",
              file=sys.stderr)
        return 1
    for bundle in bundles:
        try:
            added = parquet.add(store, bundle, bundle.environment(), upgrade=False)
        except ValueError as exc:  # a created time that is not ISO 8601, a store file that is not Parquet
            raise UsageFailure(f"history add: {bundle.folder}: {exc}") from None
        except OSError as exc:  # a full disk, a store gone read-only: the run is not stored, nothing partial is
            print(f"xmfu: history add: {bundle.manifest['run_id']} could not be written to the store "
                  f"{store} ({exc.strerror or exc}); the store holds what it held before it", file=sys.stderr)
            return 1
        print(f"{bundle.manifest['run_id']}: {'added' if added else 'already in the store'}")
    return 0


def _trend_groups(ns: argparse.Namespace, rows: list[Stored]) -> tuple[Any, str, str]:
    """(lines by workload, title, y label) for `history trend`, printing each series as it goes."""
    from xmfu.harness.results.history import judge, trend

    if ns.gap:
        points = judge.gap(rows, ns.metric, *ns.gap)
        for p in points:
            print(f"{p['day']}  {p['workload']}  {p['case_id']}  {ns.metric} {ns.gap[0]}/{ns.gap[1]} = "
                  f"{p['ratio']:.4g}")
        return (trend.gap_groups(points), f"{ns.metric}: {ns.gap[0]} / {ns.gap[1]} on matching cases, per day",
                f"{ns.metric} ratio {ns.gap[0]} / {ns.gap[1]}")
    found = judge.series(rows, ns.metric)
    for key, pts in found.items():
        print(f"{judge.series_label(key, list(found))}: {len(pts)} points, latest {pts[-1][1]:.4g} "
              f"({pts[-1][0].isoformat()})")
    return trend.series_groups(found), f"{ns.metric} over time", trend.METRIC_LABELS.get(ns.metric, ns.metric)


def _history_trend(ns: argparse.Namespace) -> int:
    from xmfu.harness.results.history import parquet, trend

    out = output_path("history trend", ns.output, (".svg", ".html")) if ns.output else None
    store = store_path("history trend", ns.store, must_hold_runs=True)
    rows = [r for r in parquet.load(store) if not ns.workload or r.workload == ns.workload]
    groups, title, ylabel = _trend_groups(ns, rows)
    if not groups:
        what = f"the gap {ns.gap[0]} / {ns.gap[1]}" if ns.gap else ns.metric
        where = f" for workload {ns.workload}" if ns.workload else ""
        raise UsageFailure(f"history trend: nothing to plot: no ok, validly timed rows give {what}{where} in the "
                           f"store {ns.store}")
    if out:
        fig = trend.figure(groups, title, ylabel, parity=bool(ns.gap))
        page = trend.svg_file(fig) if out.suffix.lower() == ".svg" else trend.html_page(
            fig, title, *trend.series_table(groups))
        write_output("history trend", out, lambda path: path.write_text(page))
        print(f"plot: {out}")
    return 0


def cmd_history(args: Sequence[str]) -> int:
    from xmfu.harness.cli import history_changes, history_check, history_issue, history_page
    from xmfu.harness.results.history.parquet import StoreError

    parser = Parser(prog="xmfu history")
    sub = parser.add_subparsers(dest="action", required=True)
    p_add = sub.add_parser("add", help="append bundles to a Parquet store (idempotent by run id)")
    p_add.add_argument("bundles", nargs="+")
    p_trend = sub.add_parser("trend", help="a metric over time per workload, case, backend and device")
    p_trend.add_argument("--metric", default="mfu", choices=sorted(_history_columns()))
    p_trend.add_argument("--workload")
    p_trend.add_argument("--gap", nargs=2, metavar=("NUMERATOR", "DENOMINATOR"),
                         help="ratio between two platforms or devices on matching cases, e.g. rocm cuda")
    p_trend.add_argument("-o", "--output", help="write the plot here: FILE.svg (the plot) or FILE.html (a page)")
    p_check = history_check.add_parser(sub, _history_columns(), history_page.add_rule_options)
    p_report = history_page.add_parser(sub)
    p_changes = history_changes.add_parser(sub)
    p_issue = history_issue.add_parser(sub, _history_columns())
    for p in (p_add, p_trend, p_check, p_report, p_changes, p_issue):
        p.add_argument("--store", required=True, help="the history folder (Parquet files)")
    for p in (p_add, p_trend, p_check, p_report, p_changes, p_issue):
        p.error = parser.error  # one-paragraph errors, exit 2
    ns = parser.parse_args(args)
    try:
        return {"add": _history_add, "trend": _history_trend, "check": lambda ns: history_check.run(ns, store_path),
                "report": lambda ns: history_page.run(ns, store_path, output_path),
                "changes": lambda ns: history_changes.run(ns, store_path),
                "issue": lambda ns: history_issue.run(ns, store_path)}[ns.action](ns)
    except UsageFailure as exc:
        return usage_error(str(exc))
    except StoreError as exc:  # a file in the store that is not Parquet, or not the store's layout
        return usage_error(f"history {ns.action}: {exc}")
    except RuntimeError as exc:  # pyarrow or matplotlib missing
        return usage_error(f"history: {exc}")


def _history_columns() -> list[str]:
    from xmfu.harness.results.history.parquet import COLUMNS

    return list(COLUMNS)
