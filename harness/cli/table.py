"""`xmfu table BUNDLE... [--wide] [--width N]`: a bundle's end-of-run table printed again, from its rows.

The table `xmfu run` prints at its end fits 120 columns (harness/results/render/table.py); this reprints it from any
bundle (a suite's folder or an archive too), the wide form with every column as `--wide`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xmfu.harness.cli.common import Parser, UsageFailure, each_gathered_bundle, usage_error


def cmd_table(args: Sequence[str]) -> int:
    from xmfu.harness.results.render.table import WIDTH, table

    parser = Parser(prog="xmfu table")
    parser.add_argument("bundles", nargs="+", help="bundle folders, suite folders, or archives made by xmfu archive")
    parser.add_argument("--wide", action="store_true", help="every column, one line per row (no width limit)")
    parser.add_argument("--width", type=int, default=WIDTH, help="the width the table fits (default %(default)s)")
    ns = parser.parse_args(args)
    if ns.width < 60:
        return usage_error(f"table: --width {ns.width} is too narrow. Allowed: 60 or more")
    try:
        for bundle in each_gathered_bundle("table", ns.bundles):
            print(f"# {bundle.folder} ({bundle.manifest.get('status', 'unknown status')})")
            print(table(bundle.rows, wide=ns.wide, width=ns.width), end="\n\n", flush=True)
    except UsageFailure as exc:
        return usage_error(str(exc))
    return 0
