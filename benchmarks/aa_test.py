"""Do xmfu's verdicts hold up? A/A false positives and A/B sensitivity, measured on this machine.

    python benchmarks/aa_test.py [--bundles 10] [--repeats 5] [--trials 10] [--out FILE]

A/A: `--bundles` separate runs of one configuration (each `repeats=N`), compared pairwise with `xmfu compare`:
every "faster" or "slower" is a false positive (the goal: at most 1 of 45).
A/B in one run: the same matmul and a copy slowed by 10% (a sleep proportional to the call, through the Python
API), interleaved with `baseline=`: how often the verdict is "slower" (the goal: 9 of 10 trials).
A/B across bundles: the slowed copy in its own runs, each `repeats=N`: the detection rate, beside the load
average recorded at the time. Everything is written under a temporary folder; the report is printed and written
to `--out` (to refresh the tracked record: `--out benchmarks/results/aa_test.txt`), else to a new file in the
system's temporary folder, whose path is printed: a run on another machine must not overwrite the record that
docs/reference-measurements.md quotes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZE = 256
RUN = ["workload=matmul", "backends=[torch]", "dtype=fp32", f"workload.sizes=[{SIZE}]", "timing=quick",
       "telemetry.enabled=false"]


def xmfu(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "xmfu", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, check=False)


def bundle_of(proc: subprocess.CompletedProcess) -> str:
    last = proc.stdout.strip().splitlines()[-1]
    if not last.startswith("bundle: "):
        raise RuntimeError(f"no bundle: {proc.stderr[-2000:]}")
    return last.removeprefix("bundle: ")


def verdicts(a: str, b: str) -> list[dict]:
    out = xmfu("compare", a, b, "--format", "json")
    return json.loads(out.stdout)["rows"]


def aa(folder: Path, bundles: int, repeats: int) -> list[str]:
    runs = [bundle_of(xmfu("run", *RUN, f"repeats={repeats}", f"results_dir={folder}")) for _ in range(bundles)]
    lines, calls = [], []
    for a, b in itertools.combinations(runs, 2):
        (row,) = verdicts(a, b)
        calls.append(row["verdict"])
    wrong = sum(v in ("faster", "slower") for v in calls)
    lines.append(f"A/A: {bundles} runs of matmul {SIZE}^3 fp32 torch, repeats={repeats}, {len(calls)} pairwise "
                 f"comparisons: {wrong} said faster or slower (goal: at most 1); verdicts "
                 f"{ {v: calls.count(v) for v in sorted(set(calls))} }")
    return lines


def _kernels(slowdown: float) -> tuple:
    """The matmul and a copy that takes `slowdown` longer per call (a busy-wait, so the CPU stays loaded)."""
    import torch

    a, b = torch.rand(SIZE, SIZE), torch.rand(SIZE, SIZE)
    start = time.perf_counter()
    for _ in range(50):
        a @ b
    per_call = (time.perf_counter() - start) / 50

    def slow():
        out = a @ b
        until = time.perf_counter() + slowdown * per_call
        while time.perf_counter() < until:
            pass
        return out

    return (lambda: a @ b), slow, (lambda: a.double() @ b.double())


TIMING = {"max_time_s": 4.0, "target_rel_ci": 0.01, "warmup_s": 0.2}


def ab_in_run(folder: Path, trials: int) -> list[str]:
    import xmfu as api

    calls = []
    for _ in range(trials):
        fast, slow, ref = _kernels(0.10)
        result = api.benchmark({"fast": fast, "slow": slow}, reference=ref, flops=2 * SIZE**3, baseline="fast",
                               tolerance=1e-5, results_dir=str(folder), timing=TIMING)
        rows = {r["backend"]: r for r in result.rows}
        calls.append((rows["slow"].get("speedup") or {}).get("verdict"))
    return [f"A/B in one run (10% slower copy, interleaved, baseline=fast): {calls.count('slower')} of {trials} "
            f"trials said slower (goal: at least 9); verdicts {calls}"]


def ab_across(folder: Path, trials: int, repeats: int) -> list[str]:
    """Each trial: the plain matmul in one bundle, the 10% slower copy in another (same case and backend
    name), each with repeats, compared with `xmfu compare`."""
    import xmfu as api

    calls = []
    for _ in range(trials):
        fast, slow, ref = _kernels(0.10)
        runs = [api.benchmark({"kernel": fn}, reference=ref, flops=2 * SIZE**3, tolerance=1e-5,
                              results_dir=str(folder), timing=TIMING, repeats=repeats).bundle for fn in (fast, slow)]
        (row,) = verdicts(*runs)
        calls.append(row["verdict"])
    return [f"A/B across bundles (10% slower copy in its own bundle, repeats={repeats} each): "
            f"{calls.count('slower')} of {trials} trials said slower, {calls.count('faster')} faster; verdicts "
            f"{calls}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundles", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--out", help="write the report here (default: a new file in the temporary folder)")
    ns = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="xmfu-aa-") as tmp:
        folder = Path(tmp)
        lines = aa(folder / "aa", ns.bundles, ns.repeats)
        lines += ab_in_run(folder / "ab", ns.trials)
        lines += ab_across(folder / "abx", ns.trials, ns.repeats)
    lines.append(f"load average before {load_before}, after {os.getloadavg()} (2-core machine; other work on it "
                 "widens the run-to-run spread)")
    report = "\n".join(lines) + "\n"
    print(report)
    if ns.out:
        out = Path(ns.out)
        out.parent.mkdir(parents=True, exist_ok=True)
    else:
        fd, name = tempfile.mkstemp(prefix="xmfu-aa_test-", suffix=".txt")
        os.close(fd)
        out = Path(name)
    out.write_text(report)
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
