"""What a fleet folder holds, read back: every step's record, each node's check (its node.json and bundles), each
pair's link test, the all-node steps; their headline figures taken from validated bundles only.

The folder (written by job.py's script and the steps it runs):
  fleet.json                    the spec
  job-<id>.sbatch, slurm-<id>.out
  nodes.txt.<jobid>             the hosts of each job, in Slurm's order
  steps/<name>.json, .err       how each srun step ended, and what it said
  nodes/<host>/<host>/node.json, nodes/<host>/...  the node's suite (nodes/<host> is its suite folder)
  links/pair-<a>-<b>/           one all_reduce bundle per pair
  all/all-collectives/, all/all-training/
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from xmfu.harness.fleet.spec import AGAIN
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.schema.row import Row

# Clock limits that say the hardware held itself back (nvml.h nvmlClocksEventReason*: slowdown, thermal, power
# brake; amdsmi gpu_metrics throttle_status): a power cap or idle clocks are how a GPU normally runs.
THROTTLING = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake", "throttled", "indep_throttled")
THROTTLED_SHARE = 0.1  # of the readings of one row, before a reason counts
# A part's exit status when a signal ended it: xmfu's own for SIGINT and SIGTERM (130), a shell's 128 + SIGTERM. Slurm
# ends a step past its time limit and a cancelled job's steps with SIGTERM (then SIGKILL): the node could not finish
# its check, which is not a failure of the node.
INTERRUPTED = (130, 143)
INTERRUPTED_MARK = "interrupted: "
ERR_TAIL = 600  # characters of a step's stderr kept as its reason
MAX_WORKERS = 4  # processes validating bundles at once (each holds one bundle at a time), at most one per core
PARALLEL_FROM = 24  # bundles: fewer are validated in this process (starting workers costs more than it saves)


@dataclass(frozen=True)
class StepRecord:
    """How one srun step ended (written by the job's script); `said`: the end of its stderr."""

    name: str
    nodes: tuple[str, ...]
    rc: int
    started: str
    finished: str
    said: str = ""


@dataclass(frozen=True)
class Figure:
    """One headline figure with its 95% CI (from the bundle's samples) and where it came from."""

    value: float
    low: float
    high: float
    unit: str
    source: str  # the bundle folder (relative to the fleet folder) and case
    contended: bool = False


@dataclass
class NodeResult:
    host: str
    step: StepRecord | None = None
    ran: bool = False  # its node.json is there
    matmul: Figure | None = None
    busbw: Figure | None = None
    devices: int | None = None
    throttled: dict[str, float] = field(default_factory=dict)  # reason -> largest share of readings
    failed_parts: list[str] = field(default_factory=list)
    doctor_problems: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # bundles that did not validate, with their first problem
    measured_again: bool = False  # its figures were flagged and the job checked it a second time
    interrupted: list[str] = field(default_factory=list)  # parts ended by a signal (scancel, a step's time limit)
    # The first check's figures: the fleet's baselines are built from these alone (diagnose.Measured), since a check
    # again runs with fewer nodes at once and, on a shared host, faster; matmul and busbw above are the better of two
    first_matmul: Figure | None = None
    first_busbw: Figure | None = None


@dataclass
class PairResult:
    a: str
    b: str
    step: StepRecord | None = None
    busbw: Figure | None = None
    invalid: str = ""
    measured_again: bool = False  # its figure was flagged and the job tested the link a second time
    first_busbw: Figure | None = None  # the first test's figure, what the links' baseline is built from

    @property
    def name(self) -> str:
        return f"pair-{self.a}-{self.b}"


@dataclass
class Fleet:
    folder: Path
    hosts: list[str]
    nodes: dict[str, NodeResult]
    pairs: list[PairResult]
    all_steps: dict[str, StepRecord | None]
    all_figures: dict[str, Figure | None]
    jobs: list[str]


def steps(folder: Path) -> dict[str, StepRecord]:
    out = {}
    for path in sorted((folder / "steps").glob("*.json")):
        try:
            data = json.loads(path.read_text())
            err = path.with_suffix(".err")
            said = err.read_text(errors="replace")[-ERR_TAIL:] if err.is_file() else ""
            out[data["name"]] = StepRecord(data["name"], tuple(str(data["nodes"]).split(",")), int(data["rc"]),
                                           str(data["started"]), str(data["finished"]), said.strip())
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a record half written when the job was killed: the step did not end in its own time
    return out


def hosts(folder: Path) -> tuple[list[str], list[str]]:
    """The fleet's hosts (every job's allocation, first job's order first) and the job ids that wrote them."""
    found: list[str] = []
    jobs = []
    for path in sorted(folder.glob("nodes.txt.*"), key=lambda p: p.stat().st_mtime):
        jobs.append(path.name.rsplit(".", 1)[-1])
        found += [h for h in path.read_text().split() if h and h not in found]
    return found, jobs


def _valid(folder: Path) -> tuple[Bundle | None, str]:
    loaded = load_bundle(folder)
    if loaded.problems or loaded.bundle is None:
        return None, f"{folder.name}: {loaded.problems[0] if loaded.problems else 'unreadable'}"
    return loaded.bundle, ""


def _timed(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if r.status == "ok" and r.timing_valid and r.time_s is not None]


def best_tflops(bundle: Bundle, where: str) -> Figure | None:
    rows = [r for r in _timed(bundle.rows) if r.tflops and (r.phase or "main") == "main"]
    if not rows:
        return None
    r = max(rows, key=lambda row: row.tflops)
    low, high = r.tflops_ci95 or [r.tflops, r.tflops]
    return Figure(r.tflops, low, high, "TFLOP/s", f"{where} {r.case_id}", bool(r.contention and r.contention.contended))


def peak_busbw(bundle: Bundle, where: str) -> Figure | None:
    """The highest bus bandwidth of the bundle's collectives, with its CI mapped through busbw = k / time."""
    rows = [r for r in _timed(bundle.rows) if r.busbw_gbps]
    if not rows:
        return None
    r = max(rows, key=lambda row: row.busbw_gbps)
    t = r.time_s
    low, high = r.busbw_gbps * t.median / t.ci95_high, r.busbw_gbps * t.median / max(t.ci95_low, 1e-300)
    return Figure(r.busbw_gbps, low, high, "GB/s busbw", f"{where} {r.case_id}",
                  bool(r.contention and r.contention.contended))


def throttling(rows: Iterable[Row]) -> dict[str, float]:
    seen: dict[str, float] = {}
    for r in rows:
        for reason, share in ((r.telemetry.throttle_fraction or {}) if r.telemetry else {}).items():
            if reason in THROTTLING and share >= THROTTLED_SHARE:
                seen[reason] = max(share, seen.get(reason, 0.0))
    return seen


@dataclass(frozen=True)
class Read:
    """What one bundle gives the fleet, taken where it was validated (a worker process, for a large fleet): its
    figures and findings, never the bundle itself."""

    invalid: str = ""  # the first problem of a bundle that does not validate ("": it validates)
    workload: str | None = None
    tflops: Figure | None = None  # best_tflops
    busbw: Figure | None = None  # peak_busbw
    throttled: dict[str, float] = field(default_factory=dict)
    failed: tuple[str, ...] = ()  # its first failed or incorrect rows


def read(path: Path, where: str) -> Read:
    """The bundle at `path` validated (load_bundle, with the formulas this process has installed) and read."""
    bundle, why = _valid(path)
    if bundle is None:
        return Read(invalid=why)
    bad = [r for r in bundle.rows if r.status in ("failed", "incorrect")]
    return Read("", bundle.manifest.get("workload"), best_tflops(bundle, where), peak_busbw(bundle, where),
                throttling(bundle.rows), tuple(f"{where}: {r.case_id} {r.backend} {r.status}" for r in bad[:3]))


def _workers(bundles: int) -> int:
    """Processes to validate `bundles` with: 1 (this one) for a few, or where processes cannot be forked (the
    workers must inherit the formulas the front door installed: validator.use_formulas is process state)."""
    if bundles < PARALLEL_FROM or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores))


def read_all(jobs: Sequence[tuple[Path, str]]) -> list[Read]:
    """`read` of every (bundle folder, where) in order: in worker processes for a large fleet (validation is CPU
    work, one bundle at a time, independent of the others), each returning only the small Read; every bundle is
    validated all the same. A pool that breaks (a worker killed) leaves the rest to this process."""
    workers = _workers(len(jobs))
    if workers == 1:
        return [read(path, where) for path, where in jobs]
    chunk = max(1, min(64, len(jobs) // (workers * 8)))  # few round trips, and the last chunks still shared out
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(read, [p for p, _ in jobs], [w for _, w in jobs], chunksize=chunk))
    except BrokenProcessPool:
        return [read(path, where) for path, where in jobs]


Item = str | tuple[Path, str]  # a part that exited non-zero (what it says), or a bundle to read (folder, where)


def _parts(folder: Path, run: str, host: str) -> tuple[dict, list[Item]] | None:
    """One node check's node.json (nodes/<run>/<host>/node.json) and, in its parts' order, its parts that exited
    non-zero and its bundles to read; None where the check left no record."""
    suite = folder / "nodes" / run
    record = suite / host / "node.json"
    if not record.is_file():
        return None
    data = json.loads(record.read_text())
    items: list[Item] = []
    for part in data.get("parts", []):
        if part.get("exit_code") in INTERRUPTED:
            items.append(f"{INTERRUPTED_MARK}{part['name']} exited {part['exit_code']}")
        elif part.get("exit_code") not in (0, None):
            items.append(f"{part['name']} exited {part['exit_code']}")
        items += [(suite / relative, f"nodes/{run}/{relative}") for relative in part.get("bundles", [])]
    return data, items


def node_record(folder: Path, host: str, step: StepRecord | None) -> tuple[NodeResult, list[Item]]:
    """The node as its node.json says (ran, devices, the doctor's problems) and what is left to add: parts that
    exited non-zero, and the bundles to read, of its check and of its check again where the job measured it a second
    time (job.again_lines: nodes/<host>-again/); `_add` keeps the better figure of the two."""
    out = NodeResult(host, step)
    first = _parts(folder, host, host)
    if first is None:
        return out, []
    data, items = first
    out.ran = True
    out.devices = len(data.get("platform", {}).get("devices") or [])
    out.doctor_problems = list((data.get("doctor") or {}).get("problems") or [])
    again = _parts(folder, f"{host}-{AGAIN}", host)
    if again is not None:
        out.measured_again = True
        items += again[1]
    return out, items


def _better(kept: Figure | None, new: Figure | None) -> Figure | None:
    return new if kept is None or (new and new.value > kept.value) else kept


def _add(out: NodeResult, r: Read, again: bool) -> None:
    if r.invalid:
        out.invalid.append(r.invalid)
        return
    out.throttled.update(r.throttled)
    out.failed_parts += r.failed
    if r.workload == "matmul":
        out.matmul = _better(out.matmul, r.tflops)
        out.first_matmul = out.first_matmul if again else _better(out.first_matmul, r.tflops)
    elif r.workload == "collectives":
        out.busbw = _better(out.busbw, r.busbw)
        out.first_busbw = out.first_busbw if again else _better(out.first_busbw, r.busbw)


def _completed(out: NodeResult, items: Sequence[Item], reads: dict[tuple[Path, str], Read]) -> NodeResult:
    again = f"nodes/{out.host}-{AGAIN}/"
    for item in items:
        if isinstance(item, str) and item.startswith(INTERRUPTED_MARK):
            out.interrupted.append(item[len(INTERRUPTED_MARK):])
        elif isinstance(item, str):
            out.failed_parts.append(item)
        else:
            _add(out, reads[item], item[1].startswith(again))
    return out


def node(folder: Path, host: str, step: StepRecord | None) -> NodeResult:
    out, items = node_record(folder, host, step)
    jobs = [i for i in items if not isinstance(i, str)]
    return _completed(out, items, dict(zip(jobs, read_all(jobs), strict=True)))


def _links(folder: Path, p: PairResult) -> list[tuple[Path, str]]:
    """The pair's link bundle, and its second measurement where the job tested the link again (job.again_lines:
    links/pair-<a>-<b>-again)."""
    names = (p.name, f"{p.name}-{AGAIN}")
    return [(folder / "links" / n, f"links/{n}") for n in names if (folder / "links" / n / "manifest.json").is_file()]


def _paired(p: PairResult, reads: Sequence[Read]) -> PairResult:
    """The better valid measurement of the link; a bundle that does not validate is named when none is valid."""
    valid = [r.busbw for r in reads if not r.invalid and r.busbw is not None]
    p.measured_again = len(reads) > 1
    if valid:
        p.busbw = max(valid, key=lambda f: f.value)
        first = reads[0]  # _links lists the first test before the test again
        p.first_busbw = first.busbw if not first.invalid and first.busbw is not None else p.busbw
    elif reads:
        p.invalid = next((r.invalid for r in reads if r.invalid), "")
    return p


def pair(folder: Path, a: str, b: str, step: StepRecord | None) -> PairResult:
    out = PairResult(a, b, step)
    return _paired(out, [read(*job) for job in _links(folder, out)])


ALL_STEPS = ("all-collectives", "all-training")


def gather(folder: Path, pairs: Sequence[tuple[str, str]]) -> Fleet:
    """Everything the fleet folder says, every bundle validated before a figure is taken from it (all of them in
    one `read_all`, so a large fleet's are validated in parallel). `pairs`: the pairs the schedule asked for (by
    host)."""
    found_steps = steps(folder)
    all_hosts, jobs = hosts(folder)
    records = {h: node_record(folder, h, found_steps.get(f"node-{h}")) for h in all_hosts}
    links = [PairResult(a, b, found_steps.get(f"pair-{a}-{b}")) for a, b in pairs]
    link_jobs = [_links(folder, p) for p in links]
    everything = {name: (folder / "all" / name, f"all/{name}") for name in ALL_STEPS
                  if (folder / "all" / name / "manifest.json").is_file()}
    todo = [i for _, items in records.values() for i in items if not isinstance(i, str)]
    todo += [j for jobs in link_jobs for j in jobs] + list(everything.values())
    reads = dict(zip(todo, read_all(todo), strict=True))
    nodes = {h: _completed(out, items, reads) for h, (out, items) in records.items()}
    links = [_paired(p, [reads[j] for j in jobs]) for p, jobs in zip(links, link_jobs, strict=True)]
    figures: dict[str, Figure | None] = {name: None for name in ALL_STEPS}
    for name, job in everything.items():
        r = reads[job]
        figures[name] = None if r.invalid else (r.busbw if name == "all-collectives" else r.tflops)
    return Fleet(folder, all_hosts, nodes, links, {n: found_steps.get(n) for n in ALL_STEPS}, figures, jobs)
