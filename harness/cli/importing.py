"""`xmfu import nccl-tests LOG...` and `xmfu import mamf-finder LOG...`: other tools' logs as ordinary bundles
(read by harness/results/importers, written by harness/results/bundle/imported.py), one per log, each printed as
`bundle: <path>` as it is written (last, as `xmfu run` prints its bundle).
A log that cannot be imported (malformed, truncated, missing what a row needs) is one paragraph and exit 2."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from xmfu.harness import __version__
from xmfu.harness.cli.common import Parser, UsageFailure, usage_error, writable_folder


def cmd_import(args: Sequence[str]) -> int:
    from xmfu.harness.results.bundle.imported import write
    from xmfu.harness.results.importers import LogError
    from xmfu.harness.results.importers.nccl_tests import OPS
    from xmfu.harness.results.importers.rows import TOOLS

    parser = Parser(prog="xmfu import")
    parser.add_argument("tool", choices=TOOLS, help="nccl-tests (also rccl-tests' logs) or mamf-finder")
    parser.add_argument("logs", nargs="+", help="the tool's output: a text log (nccl-tests: or its -J JSON file)")
    parser.add_argument("--results-dir", default="results", help="where the bundles go (default %(default)s)")
    parser.add_argument("--op", choices=tuple(OPS), help="nccl-tests: the operation, for a log that does not name "
                                                          "its <op>_perf test and whose lines do not tell it")
    parser.add_argument("--ranks", type=int, help="nccl-tests: the rank count, for a log without `Rank N` lines")
    ns = parser.parse_args(args)
    if ns.ranks is not None and ns.ranks < 1:
        return usage_error(f"import: --ranks {ns.ranks}: a rank count is a positive integer")
    if ns.tool == "mamf-finder" and (ns.op or ns.ranks):
        return usage_error("import: --op and --ranks apply to nccl-tests logs only")
    missing = [log for log in ns.logs if not Path(log).is_file()]
    if missing:
        return usage_error(f"import: {', '.join(missing)}: no such file")
    try:
        writable_folder("import", "--results-dir", ns.results_dir)
    except UsageFailure as exc:
        return usage_error(str(exc))
    for written, log in enumerate(ns.logs):  # each bundle is named as it is written, before a later log can fail
        before = " (the bundles above were)" if written else ""
        try:
            folder = write(ns.tool, Path(log), Path(ns.results_dir), ["xmfu", "import", *args], __version__, ns.op,
                           ns.ranks)
        except LogError as exc:
            return usage_error(f"import: {log} is not a {ns.tool} log xmfu can import: {exc}. Nothing was written "
                               f"for it{before}.")
        except OSError as exc:  # a full disk, a folder gone read-only meanwhile: no bundle is left half-made
            print(f"xmfu: import: the bundle of {log} could not be written in {ns.results_dir} "
                  f"({exc.strerror or exc}); nothing was written for it{before}.", file=sys.stderr)
            return 1
        print(f"bundle: {folder}", file=sys.stdout, flush=True)
    return 0
