"""How long `xmfu` takes to start: process start to the run's first line, for a JAX-only smoke run.

    python benchmarks/startup.py [--repeats 5] [--source PATH ...]

Runs `xmfu run experiment=smoke backends=[jax]` (tiny sizes) `--repeats` times, each in a fresh process, and prints
the median and range of: the time to the run's first line (`xmfu: <platform> (...); writing <bundle>`: the config
composed and checked, the platform found, the environment recorded, before the first case), the whole run, and the
frameworks the process had imported at the end. `xmfu --help` and `xmfu peaks` are timed the same way. `--source`
runs other checkouts of xmfu (each folder goes first on PYTHONPATH in its runs), e.g. an older commit for a
before/after figure; several are interleaved round by round (A B, B A, ...) so that load from other processes
falls on all of them alike. Bundles go to a temporary folder; nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "xmfu-imported:"
PROBE = ("import sys\nfrom xmfu.harness.cli.main import main\ncode = main(sys.argv[1:])\n"
         f"print({MARK!r}, ','.join(m for m in ('torch', 'jax', 'triton') if m in sys.modules) or '-', "
         "file=sys.stderr)\nraise SystemExit(code)\n")
SMOKE = ["run", "experiment=smoke", "backends=[jax]", "workload.sizes=[64]", "workload.shapes=[]",
         "timing.max_time_s=0.3", "timing.warmup_s=0"]


def timed(args: list[str], source: Path, cwd: Path) -> tuple[float | None, float, str]:
    """(seconds to the run's first line or None, seconds to exit, frameworks imported) of one fresh process."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    env.pop("TRITON_INTERPRET", None)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", PROBE, *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first, loaded = None, "?"
    for line in proc.stderr:
        if first is None and line.startswith("xmfu: ") and "; writing " in line:
            first = time.perf_counter() - start
        if line.startswith(MARK):
            loaded = line.removeprefix(MARK).strip()
    if proc.wait() != 0:
        raise SystemExit(f"xmfu {' '.join(args)} failed (exit {proc.returncode})")
    return first, time.perf_counter() - start, loaded


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s (range {min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--source", type=Path, action="append", help="an xmfu checkout to run (default: this one)")
    ns = parser.parse_args()
    sources = [s.resolve() for s in ns.source or [ROOT]]
    with tempfile.TemporaryDirectory(prefix="xmfu-startup-") as tmp:
        commands = {"--help": ["--help"], "peaks": ["peaks"], "run (jax smoke)": [*SMOKE, f"results_dir={tmp}"]}
        runs: dict[tuple[Path, str], list[tuple[float | None, float, str]]] = {}
        for i in range(ns.repeats):
            for source in sources[i % len(sources):] + sources[:i % len(sources)]:
                for name, args in commands.items():
                    runs.setdefault((source, name), []).append(timed(args, source, Path(tmp)))
    for source in sources:
        print(source)
        for name in commands:
            done = runs[(source, name)]
            firsts = [r[0] for r in done if r[0] is not None]
            head = f"to first line {summary(firsts)}; " if firsts else ""
            print(f"  xmfu {name}: {head}to exit {summary([r[1] for r in done])}; imported: {done[-1][2]}")


if __name__ == "__main__":
    main()
