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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.schema.row import Row

# Clock limits that say the hardware held itself back (nvml.h nvmlClocksEventReason*: slowdown, thermal, power
# brake; amdsmi gpu_metrics throttle_status): a power cap or idle clocks are how a GPU normally runs.
THROTTLING = ("hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake", "throttled", "indep_throttled")
THROTTLED_SHARE = 0.1  # of the readings of one row, before a reason counts
ERR_TAIL = 600  # characters of a step's stderr kept as its reason


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


@dataclass
class PairResult:
    a: str
    b: str
    step: StepRecord | None = None
    busbw: Figure | None = None
    invalid: str = ""

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


def node(folder: Path, host: str, step: StepRecord | None) -> NodeResult:
    out = NodeResult(host, step)
    suite = folder / "nodes" / host
    record = suite / host / "node.json"
    if not record.is_file():
        return out
    data = json.loads(record.read_text())
    out.ran = True
    out.devices = len(data.get("platform", {}).get("devices") or [])
    out.doctor_problems = list((data.get("doctor") or {}).get("problems") or [])
    for part in data.get("parts", []):
        if part.get("exit_code") not in (0, None):
            out.failed_parts.append(f"{part['name']} exited {part['exit_code']}")
        for relative in part.get("bundles", []):
            _read_part(out, suite / relative, f"nodes/{host}/{relative}")
    return out


def _read_part(out: NodeResult, path: Path, where: str) -> None:
    bundle, why = _valid(path)
    if bundle is None:
        out.invalid.append(why)
        return
    out.throttled.update(throttling(bundle.rows))
    bad = [r for r in bundle.rows if r.status in ("failed", "incorrect")]
    out.failed_parts += [f"{where}: {r.case_id} {r.backend} {r.status}" for r in bad[:3]]
    workload = bundle.manifest.get("workload")
    if workload == "matmul":
        found = best_tflops(bundle, where)
        out.matmul = found if out.matmul is None or (found and found.value > out.matmul.value) else out.matmul
    elif workload == "collectives":
        found = peak_busbw(bundle, where)
        out.busbw = found if out.busbw is None or (found and found.value > out.busbw.value) else out.busbw


def pair(folder: Path, a: str, b: str, step: StepRecord | None) -> PairResult:
    out = PairResult(a, b, step)
    path = folder / "links" / out.name
    if (path / "manifest.json").is_file():
        bundle, out.invalid = _valid(path)
        out.busbw = peak_busbw(bundle, f"links/{out.name}") if bundle else None
    return out


def gather(folder: Path, pairs: Sequence[tuple[str, str]]) -> Fleet:
    """Everything the fleet folder says, every bundle validated before a figure is taken from it. `pairs`: the
    pairs the schedule asked for (by host)."""
    found_steps = steps(folder)
    all_hosts, jobs = hosts(folder)
    nodes = {h: node(folder, h, found_steps.get(f"node-{h}")) for h in all_hosts}
    links = [pair(folder, a, b, found_steps.get(f"pair-{a}-{b}")) for a, b in pairs]
    everything: dict[str, Figure | None] = {}
    for name in ("all-collectives", "all-training"):
        path = folder / "all" / name
        bundle = _valid(path)[0] if (path / "manifest.json").is_file() else None
        everything[name] = None if bundle is None else (
            peak_busbw(bundle, f"all/{name}") if name == "all-collectives" else best_tflops(bundle, f"all/{name}"))
    return Fleet(folder, all_hosts, nodes, links, {n: found_steps.get(n) for n in ("all-collectives", "all-training")},
                 everything, jobs)
