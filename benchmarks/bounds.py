"""How soon xmfu's bounds end what would otherwise hang, and how long the small runs the tests make take: the wall
times that the tests no longer assert (issue 42 item 6: on a loaded machine `make test` failed on them), measured
here and printed beside the figure each was promised against.

    python benchmarks/bounds.py [--only NAME ...] [--repeats N] [--out FILE]

Each scenario runs as a user runs it (a fresh `python -m xmfu` of this checkout) in a temporary folder:

  mamf-smoke              `experiment=mamf scale=smoke` (8 shapes up to 512^3, flushed): 60 s promised (about 10 s on
                          the quiet 2-core machine, 40.5 s there at load average 12)
  torch-never-joins       rank 0 of a 2-rank DDP training step whose rank 1 never starts, timeout_s=3
  torch-dist-never-joins  rank 0 of a 2-rank torch.distributed all-reduce whose rank 1 never starts, timeout_s=3
  jax-never-joins         process 0 of 2 of a JAX collectives run whose process 1 never starts, timeout_s=3
                          (JAX's own bound would end it by SIGABRT at 63 s)
  stall-watchdog          the stall watchdog (engine/stall.py) with a 0.3 s limit, in this process: seconds to fire

The bound of a never-joins run is timeout_s plus start-up and the bundle's writing: 60 s on a quiet 2-core machine.
A figure over its bound is printed with `OVER`, and the exit status is then 1; the load average before and after is
printed beside the figures, since a loaded machine is what made the tests fail. The report is printed and written to
`--out` when given (the record docs/reference-measurements.md quotes: benchmarks/results/bounds.txt).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUICK = ["timing=quick", "timing.max_time_s=0.5", "timing.warmup_s=0"]
TRANSFORMER = ["workload=transformer", "model=tiny", "dtype=fp32", "workload.warmup=1", "workload.samples=3", *QUICK,
               "telemetry.enabled=false"]
COLLECTIVES = ["experiment=smoke", "workload.sizes=[1K,64K]", "workload.iters=3", "workload.samples=3",
               "workload.warmup=1"]


@dataclass(frozen=True)
class Scenario:
    name: str
    bound_s: float
    promise: str
    measure: Callable[[Path], float]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "RANK", "WORLD_SIZE")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed_run(args: list[str], folder: Path, expect: int, says: str, **env: str) -> float:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "xmfu", "run", *args, f"results_dir={folder}"], cwd=folder,
                          capture_output=True, text=True, timeout=900, env=_env(**env))
    took = time.monotonic() - start
    if proc.returncode != expect or says not in proc.stdout + proc.stderr:
        raise SystemExit(f"xmfu run {' '.join(args)}: exit {proc.returncode} (expected {expect}, saying "
                         f"{says!r}):\n{proc.stderr[-3000:]}")
    return took


def _rank0(port: int, **extra: str) -> dict[str, str]:
    return {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            **extra}


def mamf_smoke(folder: Path) -> float:
    return _timed_run(["experiment=mamf", "scale=smoke", "backends=[torch]", "dtype=fp32", "workload.shapes=[]",
                       *QUICK], folder, 0, "cache flushed before every call")


def torch_never_joins(folder: Path) -> float:
    return _timed_run([*TRANSFORMER, "backends=[torch]", "workload.parallel=[ddp]", "workload.timeout_s=3"], folder,
                      1, "bundle status partial", **_rank0(_free_port()))


def torch_dist_never_joins(folder: Path) -> float:
    return _timed_run(["workload=allreduce", "backends=[torch_dist]", *COLLECTIVES, "workload.timeout_s=3"], folder,
                      1, "bundle status partial", **_rank0(_free_port()))


def jax_never_joins(folder: Path) -> float:
    return _timed_run(["workload=collectives", "backends=[jax]", *COLLECTIVES, "workload.ops=[all_reduce]",
                       "workload.in_place=[false]", "workload.sizes=[1K]", "workload.timeout_s=3"], folder, 1,
                      "did not all join within 3 s", **_rank0(_free_port(), JAX_PLATFORMS="cpu"))


def stall_watchdog(folder: Path) -> float:
    from xmfu.harness.engine import stall

    fired = threading.Event()
    start = time.monotonic()
    with stall.watched(0.3, lambda idle_s: fired.set()):
        if not fired.wait(60):
            raise SystemExit("the stall watchdog did not fire within 60 s")
    return time.monotonic() - start


SCENARIOS = (
    Scenario("mamf-smoke", 60.0, "the small sweep, not the 64-shape one (issue 30)", mamf_smoke),
    Scenario("torch-never-joins", 60.0, "timeout_s=3, start-up and the bundle", torch_never_joins),
    Scenario("torch-dist-never-joins", 60.0, "timeout_s=3, start-up and the bundle", torch_dist_never_joins),
    Scenario("jax-never-joins", 3.0 + 25.0, "timeout_s=3, start-up, the bundle; JAX's own bound 63 s", jax_never_joins),
    Scenario("stall-watchdog", 3.0, "limit 0.3 s and the watching thread's poll", stall_watchdog),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=[s.name for s in SCENARIOS], help="one scenario (again "
                        "for more); default all")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each scenario (the median is compared)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    ns = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not ns.only or s.name in ns.only]
    lines = [f"# benchmarks/bounds.py on {os.cpu_count()} cores; load average before "
             f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}",
             f"{'scenario':<24} {'bound s':>8} {'median s':>9} {'range s':>13}  verdict  promise"]
    over = 0
    for scenario in chosen:
        took = []
        for _ in range(ns.repeats):
            with tempfile.TemporaryDirectory(prefix="xmfu-bounds-") as tmp:
                took.append(scenario.measure(Path(tmp)))
        median = statistics.median(took)
        verdict = "within" if median <= scenario.bound_s else "OVER"
        over += verdict == "OVER"
        lines.append(f"{scenario.name:<24} {scenario.bound_s:>8.1f} {median:>9.2f} "
                     f"{f'{min(took):.2f}-{max(took):.2f}':>13}  {verdict:<7}  {scenario.promise}")
        print(lines[-1], file=sys.stderr, flush=True)  # progress; the report follows on stdout
    lines.append(f"# load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if ns.out:
        ns.out.write_text(report)
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
