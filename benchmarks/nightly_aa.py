"""A/A for the nightly gate: one unchanged build, the nightly suite run N times into one store. Nothing changed
between the runs, so every `REGRESSION` the gate raises is a false one; the goal is none, whatever the load,
because a row its own bundle marks contended or noisy is labelled `unreliable`, not judged.

    python benchmarks/nightly_aa.py [--runs 6] [--store PATH] [--results PATH] [-- OVERRIDES...]
    python benchmarks/nightly_aa.py --replay STORE... [--ignore-contention]

Each run is `xmfu run experiment=nightly store=STORE results_dir=RESULTS` (smoke sizes where there is no
accelerator), as a process of its own, one after the other. The store and the results go to a temporary folder
unless --store / --results name one. Prints, per run: its exit status, the regressions it raised, the changes it
labelled unreliable and the load average; then the figure: false regressions over the runs the gate could judge
(a series is judged from its judge.MIN_RUNS-th run on).

--replay judges every run already in a store (or several stores' files read as one history) with this checkout's
gate, as the nightly would have after each: the same figure without running anything, for a rule changed since
the runs were made. --ignore-contention judges as if no row had been marked contended: what the rest of the rule
does on a machine quiet enough for the detector to find nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
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


def replay(stores: list[Path], ignore_contention: bool, metrics: tuple[str, ...] = ("tflops", "busbw_gbps")) -> int:
    """Print what the gate (harness/suites/nightly.judge) said of each bundle in the stores, in time order."""
    sys.path.insert(0, str(ROOT))
    import msgspec

    from xmfu.harness.results.history import judge, parquet
    from xmfu.harness.suites import nightly

    rows = [msgspec.structs.replace(r, contended=bool(r.contended) and not ignore_contention)
            for store in stores for r in parquet.load(store)]
    runs = sorted({(r.created, r.run_id) for r in rows})
    false = labelled = judged = 0
    for at, run_id in runs:
        upto = [r for r in rows if (r.created, r.run_id) <= (at, run_id)]
        mine = {r.key() for r in upto if r.run_id == run_id}
        for metric in metrics:
            found = judge.series(upto, metric)
            judged += sum(1 for key in mine if len(found.get(key, ())) >= judge.MIN_RUNS)
        with contextlib.redirect_stdout(io.StringIO()):
            verdict = nightly.judge(upto, [run_id], metrics)
        regressions = [p for p in verdict.problems if p.startswith("REGRESSION")]
        false, labelled = false + len(regressions), labelled + len(verdict.unreliable)
        for line in regressions + verdict.unreliable:
            print(f"{run_id}: {line}")
    print(f"replay of {len(runs)} bundles: {judged} series-nights judged, {false} false regressions, {labelled} "
          f"changes labelled unreliable{' (contention marks ignored)' if ignore_contention else ''}")
    return 1 if false else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="nightly runs of the one build (at least 6)")
    parser.add_argument("--store", help="the history store (default: a temporary folder)")
    parser.add_argument("--results", help="results_dir (default: a temporary folder)")
    parser.add_argument("--replay", nargs="+", metavar="STORE", help="judge the runs already in these stores")
    parser.add_argument("--ignore-contention", action="store_true", help="with --replay: as if no row were contended")
    parser.add_argument("overrides", nargs="*", help="more `xmfu run` overrides, after --")
    ns = parser.parse_args()
    if ns.replay:
        return replay([Path(s) for s in ns.replay], ns.ignore_contention)
    with tempfile.TemporaryDirectory(prefix="xmfu-nightly-aa-") as tmp:
        store = Path(ns.store or Path(tmp) / "store")
        results = Path(ns.results or Path(tmp) / "results")
        false, labelled, contended, run_to_run, failed, series = 0, 0, 0, 0, 0, 0
        for i in range(1, ns.runs + 1):
            load = os.getloadavg()[0]
            code, judged, regressions, unreliable, seconds = night(store, results, ns.overrides)
            false += len(regressions)
            series += judged
            labelled += len(unreliable)
            failed += code not in (0, 1, 3)  # 3: NOT JUDGED, a night that finished with contended rows
            print(f"run {i}: exit {code}, {judged} series judged, {len(regressions)} regressions, "
                  f"{len(unreliable)} unreliable, {seconds:.0f} s, load average {load:.2f} at the start", flush=True)
            for line in regressions + unreliable:
                print(f"  {line}")
            contended += sum(1 for line in unreliable if line.startswith("unreliable: contended"))
            run_to_run += sum(1 for line in unreliable if "run-to-run sd" in line)
        print(f"A/A nightly: {ns.runs} runs of one build, {series} series-nights judged, {false} false regressions "
              f"raised by the gate, "
              f"{labelled} changes labelled unreliable, not judged ({contended} contended, {labelled - contended} "
              f"noisy, {run_to_run} of them within the runs' own run-to-run spread), {failed} runs that did not finish "
              f"(cores: {os.cpu_count()})")
    return 1 if false or failed else 0


if __name__ == "__main__":
    sys.exit(main())
