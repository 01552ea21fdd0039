"""The `xmfu` command: run | validate | peaks | env.

Bad input is one paragraph on stderr and exit status 2; nothing here prints a traceback for it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from harness import __version__

USAGE = """usage: xmfu <command> [arguments]

commands:
  run [-m] [OVERRIDES...]   run a workload; Hydra overrides, e.g.
                            xmfu run workload=matmul backends=[torch,triton,jax] dtype=bf16 timing=quick
                            xmfu run -m dtype=fp32,bf16        (one bundle per combination)
                            xmfu run experiment=smoke          (tiny sizes, seconds on a CPU)
                            xmfu run experiment=mamf           (maximum achievable matmul FLOPS)
  validate BUNDLE...        check a result bundle's schema and checksums (exit 1 naming each problem)
  peaks [--json]            print the datasheet peak table
  env [--json]              print the detected platform, devices and the peaks that apply
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default exits 2 too, but with its own usage dump
        raise SystemExit(_usage_error(f"{self.prog}: {message}"))


def _usage_error(message: str) -> int:
    print(f"xmfu: {message}", file=sys.stderr)
    return 2


def cmd_validate(args: Sequence[str]) -> int:
    from harness.bundle import validate_bundle

    parser = _Parser(prog="xmfu validate")
    parser.add_argument("bundles", nargs="+")
    ns = parser.parse_args(args)
    worst = 0
    for folder in ns.bundles:
        problems = validate_bundle(folder)
        for p in problems:
            print(f"{folder}: {p}")
        if not problems:
            print(f"{folder}: valid")
        worst = max(worst, 1 if problems else 0)
    return worst


def cmd_peaks(args: Sequence[str]) -> int:
    from harness.peaks import load_table

    parser = _Parser(prog="xmfu peaks")
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
        print(f"{e['id']:24}{cells}{e.get('hbm_tbps', '-'):>7}  {e['source']}")
    print("CPU: " + table["cpu"]["source"])
    return 0


def cmd_env(args: Sequence[str]) -> int:
    from harness.environment import PEAK_DTYPES, peaks_used
    from harness.platform import detect

    parser = _Parser(prog="xmfu env")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "gpu"))
    ns = parser.parse_args(args)
    plat = detect(ns.device)
    if ns.json:  # everything a bundle's environment.json records
        from harness.environment import capture

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


def cmd_run(args: Sequence[str]) -> int:
    from harness.hydra_app import UsageError, run_command
    from workloads.catalog import build_registry

    try:
        return run_command(args, build_registry())
    except UsageError as exc:
        return _usage_error(f"run: {exc}")


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "peaks": cmd_peaks, "env": cmd_env}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if args[0] == "--version":
        print(f"xmfu {__version__}")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        return _usage_error(f"unknown command '{args[0]}'. Allowed: {', '.join(COMMANDS)}. See 'xmfu --help'.")
    try:
        return command(args[1:])
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BrokenPipeError:  # `xmfu peaks | head`: the reader left; not an error worth a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
