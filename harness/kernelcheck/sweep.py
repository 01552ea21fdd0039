"""The sweep: worker processes (worker.py) compile every kernel x config x dtype x target, `jobs` at a time, each
vendor's share split between them; their rows come back judged (findings.py).

Nothing is cached outside the run's own temporary folder (Triton's cache and home for the workers, removed at the
end), and every compile runs the whole compiler (TRITON_ALWAYS_COMPILE): a cached kernel would give no ptxas log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from xmfu.harness.kernelcheck.catalog import ENTRIES, Entry
from xmfu.harness.kernelcheck.facts import Facts
from xmfu.harness.kernelcheck.findings import COMPILE, Compiled, Mark, Problem, judged, stale_marks
from xmfu.harness.kernelcheck.targets import (
    DEFAULT_TARGETS,
    TARGETS,
    Occupancy,
    Target,
    amd_occupancy,
    nvidia_occupancy,
)


@dataclass(frozen=True)
class Row:
    entry: str
    kernel: str
    config: str
    params: dict[str, Any]
    dtype: str
    target: str
    error: str | None
    facts: Facts | None
    occupancy: Occupancy | None
    problems: tuple[Problem, ...]
    warnings: tuple[str, ...]
    seconds: float
    config_index: int = 0  # its place among the launch's configs
    seq: int = 0  # its place in its vendor's plan: the launch order
    skipped: str = ""  # why it was not compiled at all (nothing to judge), else ""
    cpu_seconds: float = 0.0  # the compile's CPU time (the worker and ptxas or the linker)

    @property
    def new_problems(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if not p.mark)


@dataclass(frozen=True)
class Sweep:
    rows: tuple[Row, ...]
    targets: tuple[str, ...]
    entries: tuple[str, ...]
    quick: bool
    dtypes: tuple[str, ...] | None
    triton: str  # the installed Triton's version
    seconds: float  # wall time of the whole sweep
    jobs: int
    stale: tuple[str, ...] = field(default=())  # marks a whole sweep did not need (only judged on a whole sweep)

    def target_notes(self) -> dict[str, str]:
        """Targets the installed Triton cannot compile for at all: every compile failed, for the same reason."""
        notes = {}
        for name in self.targets:
            rows = [r for r in self.rows if r.target == name]
            reasons = {r.error.split(" | ")[0] for r in rows if r.error}
            if rows and all(r.error for r in rows) and len(reasons) == 1:
                notes[name] = f"triton {self.triton} cannot compile for {name}: {reasons.pop()}"
        return notes


def occupancy(facts: Facts, target: Target) -> Occupancy:
    if target.nvidia:
        return nvidia_occupancy(target, facts.registers, facts.shared_bytes, facts.num_warps)
    return amd_occupancy(target, facts.compiler_waves, facts.shared_bytes, facts.num_warps)


def row_of(raw: dict[str, Any], marks: tuple[Mark, ...]) -> Row:
    target = TARGETS[raw["target"]]
    facts = Facts(**{k: tuple(v) if isinstance(v, list) else v for k, v in raw["facts"].items()}) \
        if raw["facts"] else None
    compiled = Compiled(raw["entry"], raw["kernel"], raw["params"], raw["dtype"], target, facts, raw["error"])
    return Row(raw["entry"], raw["kernel"], raw["config"], raw["params"], raw["dtype"], raw["target"], raw["error"],
               facts, occupancy(facts, target) if facts else None, judged(compiled, marks),
               tuple(raw.get("warnings", ())), raw["seconds"], raw["config_index"], raw["seq"],
               raw.get("skipped", ""), raw.get("cpu_seconds", 0.0))


def _environment(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the tests' setting: not here
    env.update(TRITON_CACHE_DIR=os.path.join(home, "cache"), TRITON_HOME=home, TMPDIR=home, TRITON_ALWAYS_COMPILE="1",
               TRITON_DUMP_PTXAS_LOG="1", TRITON_DEFAULT_FP_FUSION="1")  # Triton 3.9's default, stated
    return env


def run(targets: tuple[Target, ...], entries: tuple[Entry, ...], dtypes: tuple[str, ...] | None = None,
        quick: bool = False, jobs: int = 2, marks: tuple[Mark, ...] | None = None,
        progress: Callable[[int, int, dict[str, Any]], None] | None = None) -> Sweep:
    """Compile everything asked for; `progress(done, planned, raw row)` after each compile."""
    import triton

    from xmfu.harness.kernelcheck.findings import MARKS

    marks = MARKS if marks is None else marks
    start = time.perf_counter()
    requests = []
    for vendor in ("nvidia", "amd"):
        names = [t.name for t in targets if t.vendor == vendor]
        if names:
            requests += [{"vendor": vendor, "targets": names, "entries": [e.name for e in entries],
                          "dtypes": list(dtypes) if dtypes else None, "quick": quick, "shard": i, "shards": jobs}
                         for i in range(jobs)]
    with tempfile.TemporaryDirectory(prefix="xmfu-kernels-") as home:
        raws = _run_workers(requests, jobs, _environment(home), progress)
    return judge(raws, tuple(t.name for t in targets), tuple(e.name for e in entries), quick, dtypes,
                 triton.__version__, round(time.perf_counter() - start, 1), jobs, marks)


def judge(raws: list[dict[str, Any]], targets: tuple[str, ...], entries: tuple[str, ...], quick: bool,
          dtypes: tuple[str, ...] | None, triton: str, seconds: float, jobs: int, marks: tuple[Mark, ...]) -> Sweep:
    """The workers' rows (or a saved sweep's: page.from_json), judged against `marks`, in launch order per target."""
    raws = sorted(raws, key=lambda r: (targets.index(r["target"]), r["seq"]))
    rows = tuple(row_of(r, marks) for r in raws)
    whole = not quick and dtypes is None and set(targets) >= set(DEFAULT_TARGETS) and set(entries) == set(ENTRIES)
    stale = tuple(m.label() for m in stale_marks(_compiled(rows), marks)) if whole else ()
    return Sweep(rows, targets, entries, quick, dtypes, triton, seconds, jobs, stale)


def _compiled(rows: tuple[Row, ...]) -> list[Compiled]:
    return [Compiled(r.entry, r.kernel, r.params, r.dtype, TARGETS[r.target], r.facts, r.error) for r in rows]


def _run_workers(requests: list[dict[str, Any]], jobs: int, env: dict[str, str],
                 progress: Callable[[int, int, dict[str, Any]], None] | None) -> list[dict[str, Any]]:
    """The workers, `jobs` at a time, each read by its own thread; their rows as they come. A worker that fails
    stops the sweep: no further worker starts, and the running ones are ended (so are they on Ctrl-C)."""
    rows: list[dict[str, Any]] = []
    planned, running, stop = [0], set(), threading.Event()
    lock = threading.Lock()

    def work(request: dict[str, Any]) -> None:
        if stop.is_set():
            return
        with tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen([sys.executable, "-m", "xmfu.harness.kernelcheck.worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, text=True, env=env)
            running.add(proc)
            proc.stdin.write(json.dumps(request))
            proc.stdin.close()
            for line in proc.stdout:
                raw = json.loads(line)
                with lock:
                    if "planned" in raw:
                        planned[0] += raw["planned"]
                        continue
                    rows.append(raw)
                    if progress:
                        progress(len(rows), planned[0], raw)
            running.discard(proc)
            if proc.wait() and not stop.is_set():
                stop.set()
                err.seek(0)
                raise RuntimeError(f"a kernels worker failed (exit {proc.returncode}): {err.read()[-3000:]}")

    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        for done in [pool.submit(work, r) for r in requests]:
            done.result()
    finally:
        stop.set()
        for proc in list(running):
            proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)
    return rows


def failing(sweep: Sweep) -> list[str]:
    """One line per new problem, then per stale mark: what makes `xmfu kernels` exit 1."""
    lines = [f"{r.target} {r.entry} {r.kernel} {r.dtype} [{r.config}]: {p.code}: {p.detail}"
             for r in sweep.rows for p in r.new_problems]
    return lines + [f"mark no longer needed (the problem is gone; remove it from findings.MARKS): {s}"
                    for s in sweep.stale]


__all__ = ["COMPILE", "Row", "Sweep", "failing", "run"]
