"""A/A for the nightly gate: one unchanged build, the nightly suite run N times into one store. Nothing changed
between the runs, so every `REGRESSION` the gate raises is a false one; the goal is none, whatever the load,
because a row its own bundle marks contended or noisy is labelled `unreliable`, not judged.

    python benchmarks/nightly_aa.py [--runs 6] [--store PATH] [--results PATH] [-- OVERRIDES...]

Each run is `xmfu run experiment=nightly store=STORE results_dir=RESULTS` (smoke sizes where there is no
accelerator), as a process of its own, one after the other. The store and the results go to a temporary folder
unless --store / --results name one. Prints, per run: its exit status, the regressions it raised, the changes it
labelled unreliable and the load average; then the figure: false regressions over the runs the gate could judge
(a series is judged from its history.MIN_RUNS-th run on).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def night(store: Path, results: Path, extra: list[str]) -> tuple[int, int, list[str], list[str], float]:
    """(exit status, series judged, REGRESSION lines, unreliable lines, seconds) of one nightly run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "xmfu", "run", "experiment=nightly", f"store={store}",
                           f"results_dir={results}", *extra], capture_output=True, text=True, env=env, cwd=ROOT,
                          check=False)
    seconds = time.perf_counter() - start
    lines = proc.stdout.splitlines()
    regressions = [line.removeprefix("PROBLEM: ") for line in lines if line.startswith("PROBLEM: REGRESSION")]
    judged = sum(int(m.group(1)) for line in lines if (m := re.match(r"history check \S+: (\d+) series judged", line)))
    unreliable = [line.removeprefix("NOTE: ") for line in lines if line.startswith("NOTE: unreliable")]
    if proc.returncode not in (0, 1, 3):  # 3: NOT JUDGED (rows contended on this machine)
        print(proc.stderr[-3000:], file=sys.stderr)
    return proc.returncode, judged, regressions, unreliable, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="nightly runs of the one build (at least 6)")
    parser.add_argument("--store", help="the history store (default: a temporary folder)")
    parser.add_argument("--results", help="results_dir (default: a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="more `xmfu run` overrides, after --")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xmfu-nightly-aa-") as tmp:
        store = Path(ns.store or Path(tmp) / "store")
        results = Path(ns.results or Path(tmp) / "results")
        false, labelled, contended, failed, series = 0, 0, 0, 0, 0
        for i in range(1, ns.runs + 1):
            load = os.getloadavg()[0]
            code, judged, regressions, unreliable, seconds = night(store, results, ns.overrides)
            false += len(regressions)
            series += judged
            labelled += len(unreliable)
            failed += code not in (0, 1)
            print(f"run {i}: exit {code}, {judged} series judged, {len(regressions)} regressions, "
                  f"{len(unreliable)} unreliable, {seconds:.0f} s, load average {load:.2f} at the start", flush=True)
            for line in regressions + unreliable:
                print(f"  {line}")
            contended += sum(1 for line in unreliable if line.startswith("unreliable: contended"))
        print(f"A/A nightly: {ns.runs} runs of one build, {series} series-nights judged, {false} false regressions "
              f"raised by the gate, "
              f"{labelled} changes labelled unreliable, not judged ({contended} contended, {labelled - contended} "
              f"noisy), {failed} runs that did not finish "
              f"(cores: {os.cpu_count()})")
    return 1 if false or failed else 0


if __name__ == "__main__":
    sys.exit(main())
