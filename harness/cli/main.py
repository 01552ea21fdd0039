"""The `xmfu` command: run | compare | report | export | history | validate | import | doctor | peaks | references |
env. Each subcommand parses its arguments here (history in harness/cli/history.py; what they share in
harness/cli/common.py) and hands the work to the packages.

Bad input is one paragraph on stderr and exit status 2; nothing here prints a traceback for it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xmfu.harness import __version__
from xmfu.harness.cli.archive import cmd_archive
from xmfu.harness.cli.common import (
    Parser,
    UsageFailure,
    each_gathered_bundle,
    output_path,
    release_inputs,
    usage_error,
    validated_bundles,
    write_output,
)
from xmfu.harness.cli.history import cmd_history
from xmfu.harness.cli.importing import cmd_import
from xmfu.harness.cli.references import cmd_references
from xmfu.harness.cli.sign import cmd_sign
from xmfu.harness.cli.table import cmd_table
from xmfu.harness.engine import interrupts

USAGE = """usage: xmfu <command> [arguments]

commands:
  run [-m] [OVERRIDES...]   run a workload; Hydra overrides, e.g.
                            xmfu run workload=matmul backends=[torch,triton,jax] dtype=bf16 timing=quick
                            xmfu run -m dtype=fp32,bf16        (one bundle per combination)
                            xmfu run experiment=smoke          (tiny sizes, seconds on a CPU)
                            xmfu run experiment=mamf           (maximum achievable matmul FLOPS)
  compare A B [...]         matching cases side by side: speedup vs the baseline with a 95% CI, a verdict
  compare A1 A2 -- B1 B2    and the variance it used (repeats, several runs per side, --noise-from STORE);
                            refuses incomparable rows; diffs the environments; --format
                            table|csv|json|markdown; --price "DEVICE=USD/h" adds cost per token / PFLOP-hour;
                            --fail-on slower exits 1 on any slower verdict
  compare --references B... each headline figure against its public reference: ratio, 95% CI, band, source
  report BUNDLES -o F.html  one self-contained HTML report (what runs where, plots with 95% CIs, every row,
                            environments)
  history add|trend|check   a Parquet store of runs (--store PATH): append bundles (idempotent, locked),
  history report            plot a metric over time or the gap between platforms (--gap rocm cuda;
                            -o F.svg or F.html), exit 1 when the latest value moved beyond the noise;
                            report -o F.html: every series, regressions, software changes, coverage over time
  table BUNDLES [--wide]    the end-of-run table again, from the bundles' rows (120 columns; --wide: every
                            column)
  export BUNDLES -o F       every row flattened, one per case and backend: F.parquet or F.csv (for pandas)
  validate BUNDLE...        check a result bundle: files, checksums, records, and every figure re-derived from
                            its samples, formulas and the peak table (exit 1 naming each problem);
                            --verify-signature ALLOWED_SIGNERS: also its signature by `xmfu sign`
  import TOOL LOG...        another tool's results as a bundle: nccl-tests (and rccl-tests) tables or JSON,
                            mamf-finder logs; every printed figure re-derived, disagreements flagged in the row
  sign BUNDLE --key KEY     sign a valid bundle's SHA256SUMS with an OpenSSH key (ssh-keygen -Y sign)
  archive SOURCES -o F      bundles (or folders of them) packed into one .tar.gz; every command that reads
                            bundles also reads such an archive
  doctor [--json]           what xmfu sees here (frameworks, devices, peaks, telemetry fields, clocks, NCCL,
                            backends that would be skipped); exit 1 naming every problem
  peaks [--json]            print the datasheet peak table
  references [--json]       the public reference table: what others measured on each part, with conditions,
                            FLOP convention, conversions and source (--device ID: one part's)
  env [--json]              print the detected platform, devices and the peaks that apply
"""


def cmd_validate(args: Sequence[str]) -> int:
    from xmfu.harness.cli.archive import problems_of
    from xmfu.harness.cli.sign import verify

    parser = Parser(prog="xmfu validate")
    parser.add_argument("bundles", nargs="+", help="bundle folders, or archives made by xmfu archive")
    parser.add_argument("--verify-signature", metavar="ALLOWED_SIGNERS",
                        help="also require SHA256SUMS.sig made by `xmfu sign` with a key in this OpenSSH "
                             "allowed-signers file")
    ns = parser.parse_args(args)
    signers = Path(ns.verify_signature) if ns.verify_signature else Path()
    if ns.verify_signature and not signers.is_file():
        return usage_error(f"validate: --verify-signature {ns.verify_signature}: no such allowed-signers file")
    said: dict[Path, str] = {}

    def signature(folder: Path) -> list[str]:
        principal, what = verify(folder, signers)
        said[folder] = what
        return [] if principal else [what]

    worst = 0
    for path in ns.bundles:
        for where, loaded in problems_of(path, signature if ns.verify_signature else None):
            for p in loaded.problems:
                print(f"{where}: {p}")
            for note in loaded.unchecked:
                print(f"{where}: not re-derived: {note}")
            if not loaded.problems:
                signed = f", {said[loaded.bundle.folder]}" if loaded.bundle and loaded.bundle.folder in said else ""
                print(f"{where}: valid{signed}")
            worst = max(worst, 1 if loaded.problems else 0)
    return worst


SIDE = "@@side@@"  # stands for a literal `--` between the sides of `xmfu compare`


def _compare_parser() -> argparse.ArgumentParser:
    from xmfu.harness.config.run_settings import RunSettings

    parser = Parser(prog="xmfu compare")
    parser.add_argument("bundles", nargs="*")
    parser.add_argument("--baseline", help="run id or position (0-based) of the baseline side; default the first")
    parser.add_argument("--format", default="table", choices=("table", "csv", "json", "markdown"))
    parser.add_argument("--allow-incomparable", action="store_true",
                        help="compare rows whose comparability keys differ (they are marked)")
    parser.add_argument("--margin", type=float, default=RunSettings.equivalence_margin,
                        help="speedups within 1 +- this are equivalent (default %(default)s, a run's "
                             "equivalence_margin)")
    parser.add_argument("--noise-floor", type=float, default=0.10,
                        help="with one run per side and no noise estimate, smaller differences are not called")
    parser.add_argument("--noise-from", metavar="STORE", help="history store whose recent runs give the noise")
    parser.add_argument("--fail-on", choices=("slower",), help="exit 1 when any verdict is slower")
    parser.add_argument("--strict", action="store_true",
                        help="give a verdict even on rows a run marked contended (by default: inconclusive)")
    parser.add_argument("--price", action="append", default=[], metavar="DEVICE=USD_PER_HOUR")
    parser.add_argument("--prices", help="YAML file mapping device name to USD per device-hour")
    parser.add_argument("--references", action="store_true",
                        help="instead: each bundle's headline figures against their public references (xmfu "
                             "references), one or more bundles")
    return parser


def _sides(tokens: list[str]) -> list[list[str]]:
    """`A B C` -> three sides of one bundle; `A1 A2 -- B1 B2` -> two sides of two bundles."""
    if SIDE not in tokens:
        return [[t] for t in tokens]
    sides, current = [], []
    for t in tokens:
        if t == SIDE:
            sides.append(current)
            current = []
        else:
            current.append(t)
    return [*sides, current]


def cmd_compare(args: Sequence[str]) -> int:
    from xmfu.harness.config.run_settings import RunSettings
    from xmfu.harness.engine.declare import check_of
    from xmfu.harness.results.analysis.compare import Side, compare
    from xmfu.harness.results.render.compare_render import render

    ns = _compare_parser().parse_intermixed_args([SIDE if a == "--" else a for a in args])
    if ns.references:
        return _compare_references(ns)
    sides = _sides(ns.bundles)
    if len(sides) < 2 or any(not side for side in sides):
        return usage_error("compare: give at least two bundles, or two non-empty sides around '--' "
                            "(xmfu compare A1 A2 -- B1 B2)")
    fraction = check_of(RunSettings, "equivalence_margin")  # --noise-floor is a fraction of the same kind
    for name, value in (("--margin", ns.margin), ("--noise-floor", ns.noise_floor)):
        if not fraction.allows(value):
            return usage_error(f"compare: {name} {value} is out of range. Allowed: {fraction.allowed()}")
    try:
        loaded = [Side([b for f in side for b in validated_bundles("compare", f)]) for side in sides]
        prices = _prices(ns)
        noise = _history_noise(ns.noise_from) if ns.noise_from else None
    except UsageFailure as exc:
        return usage_error(str(exc))
    base = _baseline_index(ns.baseline, loaded)
    if base is None:
        labels = ", ".join(s.label for s in loaded)
        return usage_error(f"compare: --baseline {ns.baseline!r} is neither a run id ({labels}) "
                            f"nor a position 0-{len(loaded) - 1}")
    result = compare(loaded, base, ns.allow_incomparable, ns.margin, ns.noise_floor, noise, ns.strict)
    if prices:
        _unpriced_note(ns, {r.get("device") for s in loaded for b in s.bundles for r in b.cases})
        _add_costs(result, loaded, prices)
    print(render(result, ns.format))
    if result.unmatched and not result.rows and not result.refused:
        print("xmfu: compare: no case matched: " + "; ".join(result.unmatched), file=sys.stderr)
        return 2
    if ns.fail_on == "slower" and any(r["verdict"] == "slower" for r in result.rows):
        return 1
    return 1 if result.refused and not result.rows else 0


def _compare_references(ns: argparse.Namespace) -> int:
    """`xmfu compare --references BUNDLE...`: the headline figures against their public references, as a table."""
    from xmfu.harness.machine.references import default_bands
    from xmfu.harness.suites import yardsticks

    tokens = [t for t in ns.bundles if t != SIDE]
    if not tokens:
        return usage_error("compare: --references needs at least one bundle (xmfu compare --references BUNDLE...)")
    try:
        bundles = [b for path in tokens for b in validated_bundles("compare", path)]
    except UsageFailure as exc:
        return usage_error(str(exc))
    print(yardsticks.render(yardsticks.of_bundles(bundles, default_bands()), ns.format))
    return 0


def _prices(ns: argparse.Namespace) -> dict[str, float]:
    from xmfu.harness.results.analysis.cost import load_prices, parse_prices

    try:
        return {**(load_prices(ns.prices) if ns.prices else {}), **parse_prices(ns.price)}
    except ValueError as exc:  # each names its option (--price, --prices)
        raise UsageFailure(f"compare: {exc}") from None
    except OSError as exc:  # the --prices file cannot be read; the error alone would name only the path
        raise UsageFailure(f"compare: --prices {ns.prices}: {exc.strerror or exc}") from None


def _unpriced_note(ns: argparse.Namespace, devices: set[Any]) -> None:
    """A price whose device no row has is named on stderr with the devices the rows have: prices are matched to
    rows by the exact device name (docs/compare.md), and a misspelt one would otherwise leave the cost columns
    empty without a word. A --prices file may list a whole fleet: it is named only when none of it matches."""
    from xmfu.harness.results.analysis.cost import load_prices, parse_prices

    # both were read once by _prices without error
    missed = sorted(d for d in parse_prices(ns.price) if d not in devices)
    if ns.prices and not set(load_prices(ns.prices)) & devices:
        missed.append(f"every device in --prices {ns.prices}")
    if missed:
        have = ", ".join(sorted(repr(d) for d in devices if d)) or "none"
        print(f"xmfu: compare: no row has the device of {', '.join(repr(m) for m in missed)}, so it is not "
              f"priced (a price names the device exactly as rows record it). The rows' devices: {have}",
              file=sys.stderr)


def _history_noise(store: str) -> Any:
    from xmfu.harness.results.history import judge, parquet

    try:
        return judge.run_to_run_noise(parquet.load(Path(store)))
    except (RuntimeError, OSError, ValueError) as exc:  # ValueError: parquet.StoreError
        raise UsageFailure(f"compare: --noise-from {store}: {exc}") from None


def _baseline_index(baseline: str | None, sides: list[Any]) -> int | None:
    if baseline is None:
        return 0
    labels = [s.label for s in sides]
    runs = [[b.manifest["run_id"] for b in s.bundles] for s in sides]
    for i, ids in enumerate(runs):
        if baseline == labels[i] or baseline in ids:
            return i
    return int(baseline) if baseline.isdigit() and int(baseline) < len(sides) else None


def _add_costs(result: Any, sides: list[Any], prices: dict[str, float]) -> None:
    from xmfu.harness.results.analysis.cost import break_even, cost_figures

    rows = {(s.label, r["case_id"], r["backend"]): r for s in sides for b in s.bundles for r in b.cases}
    for row in result.rows:
        cand, ref = rows[(row["run"], row["case_id"], row["backend"])], rows[
            (row["baseline_run"], row["case_id"], row["backend"])]
        p_cand, p_ref = prices.get(cand["device"]), prices.get(ref["device"])
        row["cost"] = cost_figures(cand, p_cand)
        row["baseline_cost"] = cost_figures(ref, p_ref)
        row.update(break_even(row["speedup"], p_cand / p_ref if p_cand and p_ref else None))


def cmd_report(args: Sequence[str]) -> int:
    from xmfu.harness.results.render import report

    parser = Parser(prog="xmfu report")
    parser.add_argument("bundles", nargs="+")
    parser.add_argument("-o", "--output", default="report.html")
    ns = parser.parse_args(args)
    try:
        out = output_path("report", ns.output)
        bundles = [b for path in ns.bundles for b in validated_bundles("report", path)]
        envs = [b.environment() for b in bundles]
        telemetry = {b.manifest["run_id"]: b.telemetry() for b in bundles}
        from xmfu.harness.machine.references import default_bands
        from xmfu.harness.suites import yardsticks

        against = yardsticks.html(yardsticks.of_bundles(bundles, default_bands()))
        page = report.build(bundles, envs, telemetry, lead=[("Public references", against)] if against else ())
        write_output("report", out, lambda path: path.write_text(page))
    except UsageFailure as exc:
        return usage_error(str(exc))
    except RuntimeError as exc:  # matplotlib missing
        return usage_error(f"report: {exc}")
    print(f"report: {out}")
    return 0


def cmd_export(args: Sequence[str]) -> int:
    from xmfu.harness.results.bundle.reader import read_bundle
    from xmfu.harness.results.render import export

    parser = Parser(prog="xmfu export")
    parser.add_argument("bundles", nargs="+")
    parser.add_argument("-o", "--output", required=True, help="rows.parquet or rows.csv")
    ns = parser.parse_args(args)
    try:
        out = output_path("export", ns.output, export.SUFFIXES)
        # Two passes, one bundle in memory at a time (export.write_streaming): the first validates every bundle
        # and learns the columns and their types, the second re-reads each validated folder and writes its rows.
        folders: list[Any] = []

        def validated() -> Any:
            for bundle in each_gathered_bundle("export", ns.bundles):
                folders.append(bundle.folder)
                yield bundle

        kinds, count = export.survey(validated())
        write_output("export", out, lambda path: export.write_streaming(kinds, map(read_bundle, folders), path))
    except UsageFailure as exc:
        return usage_error(str(exc))
    except RuntimeError as exc:  # pyarrow missing
        return usage_error(f"export: {exc}")
    print(f"export: {count} rows to {out}")
    return 0


def cmd_peaks(args: Sequence[str]) -> int:
    from xmfu.harness.machine.peaks import load_table

    parser = Parser(prog="xmfu peaks")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args(args)
    table = load_table()
    if ns.json:
        print(json.dumps(table["devices"], indent=2))
        return 0
    dtypes = ("bf16", "fp16", "fp8", "tf32", "fp32")
    print("dense TFLOP/s (no sparsity); HBM TB/s; '-' = none published")
    print(f"{'id':24}" + "".join(f"{d:>9}" for d in dtypes) + f"{'HBM':>7}  source")
    for e in table["devices"]:
        cells = "".join(f"{'-' if e['tflops'].get(d) is None else format(e['tflops'][d], 'g'):>9}" for d in dtypes)
        print(f"{e['id']:24}{cells}{e.get('hbm_tbps') or '-':>7}  {e['source']}")
    print("CPU: " + table["cpu"]["source"])
    return 0


def cmd_env(args: Sequence[str]) -> int:
    from xmfu.harness.config.run_settings import DEVICES, RunSettings
    from xmfu.harness.machine.environment import PEAK_DTYPES, peaks_used
    from xmfu.harness.machine.platform import NoAcceleratorError, detect

    parser = Parser(prog="xmfu env")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", default=RunSettings.device, choices=DEVICES)
    ns = parser.parse_args(args)
    try:
        plat = detect(ns.device)
    except NoAcceleratorError as exc:
        return usage_error(f"env: {exc}")
    if ns.json:  # everything a bundle's environment.json records
        from xmfu.harness.machine.environment import capture

        print(json.dumps(capture(plat), indent=2, sort_keys=True, default=str))
        return 0
    peaks = peaks_used(plat)
    print(f"platform: {plat.kind} ({plat.reason})")
    for d in plat.devices:
        extra = d.compute_capability or d.arch or ""
        mem = f"{d.memory_bytes / 2**30:.1f} GiB" if d.memory_bytes else "memory unknown"
        print(f"device {d.index}: {d.name} [{extra}] {mem}, {d.multiprocessors} SMs/CUs/cores")
    print("peaks for this device (dense TFLOP/s):")
    for dtype in PEAK_DTYPES:
        p = peaks["by_dtype"][dtype]
        value = "null" if p["peak_tflops"] is None else f"{p['peak_tflops']:.4g}"
        print(f"  {dtype:5} {value:>9}  {p['peak_note'] or p['peak_source']}")
    return 0


def cmd_doctor(args: Sequence[str]) -> int:
    from xmfu.harness.suites import doctor

    parser = Parser(prog="xmfu doctor")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args(args)
    return doctor.main(["--json"] if ns.json else [])


def cmd_run(args: Sequence[str]) -> int:
    from xmfu.harness.config.hydra_app import UsageError, run_command
    from xmfu.harness.suites.suite import maybe_run
    from xmfu.workloads.catalog import build_registry

    try:
        registry = build_registry()
        code = maybe_run(args, registry)  # experiment=acceptance, experiment=nightly: a suite of runs
        return run_command(args, registry) if code is None else code
    except UsageError as exc:
        if _CTRL_C.seen:  # the interrupt surfaced as someone's error (see _CtrlC): main reports it as Ctrl-C
            raise
        return usage_error(f"run: {exc}")


COMMANDS = {"run": cmd_run, "compare": cmd_compare, "report": cmd_report, "history": cmd_history,
            "export": cmd_export, "archive": cmd_archive, "validate": cmd_validate, "import": cmd_import,
            "sign": cmd_sign, "doctor": cmd_doctor, "table": cmd_table,
            "peaks": cmd_peaks, "references": cmd_references, "env": cmd_env}


def _strip_run_from_completion_line() -> None:
    """Hydra's completion reads COMP_LINE and drops the program name; drop our `run` too, so the words it
    completes are the overrides (`xmfu run workload=ma<TAB>`)."""
    line = os.environ.get("COMP_LINE")
    if line:
        words = line.split(" ")
        if len(words) > 1 and words[1] == "run":
            os.environ["COMP_LINE"] = " ".join([words[0], *words[2:]])


class _CtrlC:
    """SIGINT or SIGTERM during start-up, remembered. A library may catch the KeyboardInterrupt and re-raise it as an
    error of its own, with no text (Hydra's composition, an interrupted import); the command still ends as
    interrupted (130), never as bad input. The run installs its own handler once it starts; an interrupt that
    came before and was swallowed on its way (a gc callback) makes the run start interrupted. SIGTERM is handled as
    SIGINT is (README: an interrupt exits 130, whichever signal; the default action would end the process as 143)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.seen = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _CtrlC:
        self.seen = bool(_LEAVING["signals"])  # one that came as the process started (run_as_module's handler)
        interrupts.remember_start_up_interrupt(_LEAVING["signals"][-1] if self.seen else None)
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
            self.previous = {s: signal.signal(s, self._on_signal) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        interrupts.remember_start_up_interrupt(None)  # the command is over: nothing is left to interrupt
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.seen = True
        interrupts.remember_start_up_interrupt(signum)  # in case the KeyboardInterrupt is swallowed on its way
        raise KeyboardInterrupt


_CTRL_C = _CtrlC()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with _CTRL_C:
            return _dispatch(args)
    except KeyboardInterrupt:  # Ctrl-C before a run's own handler is installed (start-up, imports)
        print("xmfu: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BrokenPipeError:  # `xmfu peaks | head`: the reader left; not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception:
        if _CTRL_C.seen:  # a library turned an early Ctrl-C into an error of its own (Hydra, a cut-short import)
            print("xmfu: interrupted", file=sys.stderr)
            return 130
        raise
    finally:
        release_inputs()  # the temporary folders of the archives the command read


def _dispatch(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if args[0] == "--version":
        print(f"xmfu {__version__}")
        return 0
    if args[0] in ("-sc", "--shell-completion"):  # the completion script Hydra installs calls `xmfu -sc query=...`
        _strip_run_from_completion_line()
        args = ["run", *args]
    command = COMMANDS.get(args[0])
    if command is None:
        return usage_error(f"unknown command '{args[0]}'. Allowed: {', '.join(COMMANDS)}. See 'xmfu --help'.")
    # Every bundle a command reads is checked against the workloads' FLOP and byte formulas. Imported here, not at
    # the top: it brings the engine and numpy, and until run_as_module's handlers are in place a Ctrl-C at start-up
    # would end the process with a traceback (test_ctrl_c_during_start_up_exits_130_without_a_traceback).
    from xmfu.harness.cli import formulas

    formulas.install()
    return command(args[1:])


_LEAVING: dict[str, list[int]] = {"signals": []}


def _record_signal(signum: int, frame: Any) -> None:
    """The process's handler outside `main`'s (before it installs its own, and after it has put this one back): a
    signal is recorded, never acted on, so nothing cuts short the way out, and none kills the process as 143."""
    _LEAVING["signals"].append(signum)


def run_as_module() -> None:
    """The `xmfu` console script and `python -m xmfu` (torchrun's form): `main`, then leave with its status."""
    from xmfu.harness.machine.threads import prepare_environment

    prepare_environment()  # the console script's first chance, before any command imports torch (threads.py)
    if threading.current_thread() is threading.main_thread():
        for s in _CtrlC.SIGNALS:
            signal.signal(s, _record_signal)
    status = main()
    if status == 130:
        # Interrupted: the bundle is finished and its files closed (the run held every further signal until then).
        # Leave at once, without the interpreter's shutdown: with torch and JAX both loaded, that shutdown after a
        # SIGTERM ended in SIGSEGV (exit 139) in 3 of 12 trials (issue 26), and the status must be 130. os._exit
        # skips atexit handlers and the flushing of Python's buffers, hence the flushes; files already closed are
        # in the kernel's hands and kept. It also covers a Ctrl-C whose KeyboardInterrupt once escaped code that a
        # C extension ran during an import: CPython then remembers it (_Py_UnhandledKeyboardInterrupt) and, for -m,
        # ends the process by re-raising SIGINT (status -2) even though main caught it (Modules/main.c, Py_RunMain).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(status)


if __name__ == "__main__":
    run_as_module()
