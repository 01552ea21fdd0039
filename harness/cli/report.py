"""`xmfu report` (one self-contained HTML page of bundles) and `xmfu export` (every row flattened into Parquet or
CSV for pandas): both validate every bundle first and write their file whole or not at all."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from xmfu.harness.cli.common import (
    Parser,
    UsageFailure,
    each_gathered_bundle,
    output_path,
    usage_error,
    validated_bundles,
    write_output,
)


def _written(command: str, write: Callable[[], str]) -> int:
    """Run `write`, which writes the output and returns the line that says so; bad input or a missing optional
    package (matplotlib, pyarrow: RuntimeError) is one paragraph and exit status 2."""
    try:
        said = write()
    except UsageFailure as exc:
        return usage_error(str(exc))
    except RuntimeError as exc:
        return usage_error(f"{command}: {exc}")
    print(said)
    return 0


def cmd_report(args: Sequence[str]) -> int:
    parser = Parser(prog="xmfu report")
    parser.add_argument("bundles", nargs="+")
    parser.add_argument("-o", "--output", default="report.html")
    ns = parser.parse_args(args)
    return _written("report", lambda: _report(ns))


def _report(ns: argparse.Namespace) -> str:
    from xmfu.harness.machine.references import default_bands
    from xmfu.harness.results.render import report
    from xmfu.harness.suites import yardsticks

    out = output_path("report", ns.output)
    bundles = [b for path in ns.bundles for b in validated_bundles("report", path)]
    envs = [b.environment() for b in bundles]
    telemetry = {b.manifest["run_id"]: b.telemetry() for b in bundles}
    against = yardsticks.html(yardsticks.of_bundles(bundles, default_bands()))
    page = report.build(bundles, envs, telemetry, lead=[("Public references", against)] if against else ())
    write_output("report", out, lambda path: path.write_text(page))
    return f"report: {out}"


def cmd_export(args: Sequence[str]) -> int:
    parser = Parser(prog="xmfu export")
    parser.add_argument("bundles", nargs="+")
    parser.add_argument("-o", "--output", required=True, help="rows.parquet or rows.csv")
    ns = parser.parse_args(args)
    return _written("export", lambda: _export(ns))


def _export(ns: argparse.Namespace) -> str:
    from xmfu.harness.results.bundle.reader import read_bundle
    from xmfu.harness.results.render import export

    out = output_path("export", ns.output, export.SUFFIXES)
    # Two passes, one bundle in memory at a time (export.write_streaming): the first validates every bundle and
    # learns the columns and their types, the second re-reads each validated folder and writes its rows.
    folders: list[Any] = []

    def validated() -> Any:
        for bundle in each_gathered_bundle("export", ns.bundles):
            folders.append(bundle.folder)
            yield bundle

    kinds, count = export.survey(validated())
    write_output("export", out, lambda path: export.write_streaming(kinds, map(read_bundle, folders), path))
    return f"export: {count} rows to {out}"
