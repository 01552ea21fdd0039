"""The `xmfu` command: run | compare | report | export | history | validate | import | doctor | peaks | references |
env | kernels. Each subcommand parses its arguments here (history in harness/cli/history.py; what they share in
harness/cli/common.py) and hands the work to the packages.

Bad input is one paragraph on stderr and exit status 2; nothing here prints a traceback for it.
"""

# ruff: noqa: E402  (the console script's start-up guard comes before this module's imports, on purpose)
from __future__ import annotations

from xmfu.harness.cli import start_up

start_up.guard_the_console_script()  # before the imports below: a Ctrl-C among them exits 130, no traceback

import gc
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
    holds_bundles,
    keep_to_exit,
    release_inputs,
    usage_error,
)
from xmfu.harness.cli.compare import cmd_compare
from xmfu.harness.cli.history import cmd_history
from xmfu.harness.cli.importing import cmd_import
from xmfu.harness.cli.references import cmd_references
from xmfu.harness.cli.report import cmd_export, cmd_report
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
  kernels [--targets T,...] every Triton kernel x autotune config x dtype compiled for GPU targets here, no GPU
                            needed (sm80,sm90,sm100,gfx942,gfx950): instructions (wgmma, tcgen05, mma.sync, MFMA),
                            registers, spills, shared memory, occupancy; exit 1 naming each new problem; --json
  fleet run --nodes N       a candidate cluster on its own Slurm: every node's check, every link (node pairs),
  fleet report|resume DIR   then all nodes; diagnosis against the fleet's robust baseline or --baseline, with
                            --rules; admitted.json, excluded.json (reason codes) and a verdict page (docs/fleet.md)
"""


def cmd_validate(args: Sequence[str]) -> int:
    from xmfu.harness.cli.archive import problems_of
    from xmfu.harness.cli.sign import verify

    parser = Parser(prog="xmfu validate")
    parser.add_argument("bundles", nargs="+", help="bundle folders, suite folders, or archives made by xmfu archive")
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
    print("dense TFLOP/s (no sparsity); HBM TB/s; TDP W (board power, where a vendor document was read: --json has "
          "its source and words); '-' = none published")
    print(f"{'id':24}" + "".join(f"{d:>9}" for d in dtypes) + f"{'HBM':>7}{'TDP':>6}  source")
    for e in table["devices"]:
        cells = "".join(f"{'-' if e['tflops'].get(d) is None else format(e['tflops'][d], 'g'):>9}" for d in dtypes)
        tdp = format(e["tdp"]["w"], "g") if e.get("tdp") else "-"
        print(f"{e['id']:24}{cells}{e.get('hbm_tbps') or '-':>7}{tdp:>6}  {e['source']}")
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


def cmd_fleet(args: Sequence[str]) -> int:
    """`xmfu fleet`, imported when asked for (its modules are not every command's start-up cost)."""
    from xmfu.harness.cli.fleet import cmd_fleet as fleet

    return fleet(args)


def cmd_kernels(args: Sequence[str]) -> int:
    """`xmfu kernels`, imported when asked for (the kernel catalog is not every command's start-up cost)."""
    from xmfu.harness.cli.kernels import cmd_kernels as kernels

    return kernels(args)


COMMANDS = {"run": cmd_run, "compare": cmd_compare, "report": cmd_report, "history": cmd_history,
            "export": cmd_export, "archive": cmd_archive, "validate": cmd_validate, "import": cmd_import,
            "sign": cmd_sign, "doctor": cmd_doctor, "table": cmd_table,
            "peaks": cmd_peaks, "references": cmd_references, "env": cmd_env, "fleet": cmd_fleet,
            "kernels": cmd_kernels}


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
        code = exc.code if isinstance(exc.code, int) else 1
        if code not in (0, 130) and _CTRL_C.seen:  # a library that caught the interrupt and exited on its own
            print("xmfu: interrupted", file=sys.stderr)
            return 130
        return code
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
    keep_to_exit()  # what a command holds to its end is not freed one object at a time (leave_without_freeing)
    gc.freeze()  # what the imports made lives to the end (start_up.guard paused the collector for them)
    gc.enable()
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
    if holds_bundles() and threading.active_count() == 1:
        leave_without_freeing(status)
    sys.exit(status)


def leave_without_freeing(status: int) -> None:
    """The interpreter's exit without its freeing of every object one at a time: a command that read bundles holds
    a million objects for each 4,000-row one it decoded, and freeing them cost a tenth of a second of CPU per bundle
    (6% of `xmfu compare`'s on two, benchmarks/validation_cost.py, 3 December 2026). What the exit does that matters
    is done: the atexit handlers run (logging's, temporary folders' finalizers), Python's buffers of the standard
    streams are flushed (a reader that left a pipe early is no error, as in `main`); the caller has seen that no
    other thread runs (the interpreter would wait for it). Files a command wrote are closed before it returns."""
    import atexit
    import contextlib

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BrokenPipeError, ValueError):  # the reader left, or the stream was closed
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    run_as_module()
