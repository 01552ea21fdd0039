"""`xmfu kernels`: every Triton kernel of xmfu compiled for GPU targets on this machine, no GPU needed
(harness/kernelcheck); a table, or JSON with --json. Exit 1 naming each new problem (a compile that fails, spills,
passes the part's shared memory or falls back from the part's matrix instructions); 2 for bad input."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from xmfu.harness.cli.common import Parser, usage_error
from xmfu.harness.kernelcheck.catalog import ENTRIES, EntryError, parse_entries
from xmfu.harness.kernelcheck.targets import DEFAULT_TARGETS, TargetError, parse_targets

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


def cmd_kernels(args: Sequence[str]) -> int:
    parser = Parser(prog="xmfu kernels", allow_abbrev=False,  # `--target sm90` is not `--targets sm90`
                    description="compile every Triton kernel of xmfu for GPU targets (no GPU needed): instructions, "
                    "registers, spills, shared memory, occupancy")
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                        help=f"comma-separated (default {','.join(DEFAULT_TARGETS)})")
    parser.add_argument("--kernels", default=None, help=f"comma-separated, of {', '.join(ENTRIES)} (default all)")
    parser.add_argument("--dtypes", default=None, help=f"comma-separated, of {', '.join(DTYPES)} (default: every "
                        "dtype xmfu's backends offer on the target, but fp32 where a kernel multiplies matrices: "
                        "its ieee dots run the tensor-core tiles on FMA units, slow to compile and spilling)")
    parser.add_argument("--quick", action="store_true", help="one config of each kernel per target, bf16")
    parser.add_argument("-j", "--jobs", type=int, default=min(8, os.cpu_count() or 1),
                        help="compiler processes at once (default: the CPUs, at most 8)")
    parser.add_argument("--json", action="store_true", help="every row as JSON on stdout")
    ns = parser.parse_args(args)
    try:
        targets = parse_targets(ns.targets)
        entries = parse_entries(ns.kernels)
    except (TargetError, EntryError) as exc:
        return usage_error(f"kernels: {exc}")
    dtypes = tuple(d.strip() for d in ns.dtypes.split(",") if d.strip()) if ns.dtypes else None
    if dtypes is not None and (not dtypes or set(dtypes) - set(DTYPES)):
        return usage_error(f"kernels: --dtypes {ns.dtypes}: unknown dtype. Allowed: {', '.join(DTYPES)} "
                           "(comma-separated)")
    if ns.jobs < 1:
        return usage_error(f"kernels: --jobs {ns.jobs}: must be 1 or more")
    why = _no_compiler()
    if why:
        return usage_error(f"kernels: {why}")
    from xmfu.harness.kernelcheck import page, sweep

    result = sweep.run(targets, entries, dtypes, ns.quick, ns.jobs, progress=_progress)
    print(json.dumps(page.to_json(result), indent=1) if ns.json else page.table(result))
    problems = sweep.failing(result)
    for line in problems:
        print(f"xmfu kernels: {line}", file=sys.stderr)
    cpu = sum(r.cpu_seconds for r in result.rows)
    print(f"xmfu kernels: {len(result.rows)} compiles in {result.seconds:.0f} s ({ns.jobs} at once; {cpu:.0f} s of "
          f"CPU), {len(problems)} new problem(s)", file=sys.stderr)
    return 1 if problems else 0


def _no_compiler() -> str | None:
    try:
        import triton  # noqa: F401
        from triton.backends.compiler import GPUTarget  # noqa: F401
    except ImportError as exc:
        return f"needs Triton (3.2 or later) installed: {exc}"
    return None


def _progress(done: int, planned: int, raw: dict[str, Any]) -> None:
    if sys.stderr.isatty() or done % 25 == 0:
        print(f"xmfu kernels: {done}/{planned} compiled ({raw['target']} {raw['entry']} {raw['kernel']} "
              f"{raw['dtype']})", file=sys.stderr)
