"""A simulated fleet of N nodes (default 1,024) made from real bundles, with planted faults; then `xmfu fleet report`
on it, timed, and its diagnosis checked against what was planted (issue 43 part 3, "Simulation").

    python benchmarks/fleet_simulation.py                          # 1,024 nodes, seed 0, 3 timed reports
    python benchmarks/fleet_simulation.py --nodes 24 --seed 3 --runs 1 --out DIR

The fleet folder has the layout of `xmfu fleet run`'s (harness/fleet/gather.py): fleet.json, nodes.txt.1, a step
record per step, every node's node.json and the bundles of its check, one link bundle per pair of the quick
schedule (harness/fleet/schedule.py). Every bundle is made from a real one: the bundles of a 4-node fleet run on the
local Slurm cluster (scripts/slurm_local.sh), kept in tests/fleet/data/try2. A generated bundle is its template with
the raw samples (samples.jsonl: samples, rank_samples, warm-up) multiplied by one factor, so its headline figure
(the one gather.py takes: best matmul TFLOP/s, peak busbw) is the fleet's nominal figure times the node's or link's
own speed; every figure that follows from the samples is then re-derived by the engine's own functions
(statistics.summary.summarize, engine.metrics.throughput and utilization, row_sections.rank_fields, telemetry
aggregate.efficiency, and the collectives' bandwidth formula through the front door's cli/formulas.restate_rows),
and the hosts, run ids and paths are rewritten, so each bundle validates as a run's own would.

Speeds: lognormal, sigma 2% (matmul), 3% (node collective, links), a spread of the order that GPUs of one SKU show
across a cluster (Sinha et al., "Not All GPUs Are Created Equal", SC'22, arXiv 2208.11035: 8% average variation
over five clusters' GPUs, outliers up to 1.5x slower than the median, like the planted slow nodes). Planted
(`planted.json` beside the folder, not in it): K nodes with a matmul 25-40% slower (slow-matmul); K links 30-50%
slower (slow-link), no two on one node and none on a partner of the node that could not run (a node whose every
judged link is slow is blamed itself, diagnose.link_findings); one node whose node.json lists one device fewer
(missing-device); one node that could not run (no node.json, its step record ended by Slurm's time limit, its
links never ran). A fault is planted only in a template whose headline CI reaches at most DECIDABLE above its
value: one real link's 1 MiB all_reduce was 40% wide on the contended CPU cluster, where no rule can tell a 30% slow
link from noise. The all-node steps are not simulated.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xmfu.harness.cli.formulas import install, restate_rows  # noqa: E402
from xmfu.harness.engine.metrics import throughput, utilization  # noqa: E402
from xmfu.harness.engine.row_sections import rank_fields  # noqa: E402
from xmfu.harness.fleet import schedule, spec  # noqa: E402
from xmfu.harness.fleet.gather import best_tflops, peak_busbw  # noqa: E402
from xmfu.harness.machine.peaks import Peak  # noqa: E402
from xmfu.harness.machine.telemetry.aggregate import efficiency  # noqa: E402
from xmfu.harness.results import schema  # noqa: E402
from xmfu.harness.results.bundle.validator import load_bundle  # noqa: E402
from xmfu.harness.results.rederive.times import settings_of  # noqa: E402
from xmfu.harness.results.statistics.summary import BOOTSTRAP_RESAMPLES, summarize  # noqa: E402

DATA = ROOT / "tests" / "fleet" / "data" / "try2"
SPREAD = {"matmul": 0.02, "collectives": 0.03, "link": 0.03}  # lognormal sigma of each figure across the fleet
SLOW_NODE, SLOW_LINK = (0.25, 0.40), (0.30, 0.50)  # planted slowdowns: the figure is (1 - s) x its own
DECIDABLE = 1.10  # a fault's template: its headline CI's upper end within 10% of its value
DEVICES = 8  # devices per simulated node (the real CPU nodes list one; node.json's list is replicated)
TIME_LIMIT = ("srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
              "slurmstepd: error: *** STEP 1.{step} ON {host} CANCELLED AT 2026-12-02T03:30:05 DUE TO TIME LIMIT ***\n"
              "srun: error: {host}: task 0: Terminated\n")  # slurmstepd's and srun's words (Slurm 22.05)


@dataclass(frozen=True)
class Template:
    """One real bundle, read and validated once: what every bundle made from it starts from."""

    kind: str  # matmul | collectives | link
    relative: str  # its folder under the real fleet folder
    hosts: tuple[str, ...]  # the real hosts it names (a link: its two, in rank order)
    files: dict[str, bytes]
    sums: tuple[str, ...]  # SHA256SUMS' file names, in its order
    figure: float  # its headline figure, as gather.py reads it
    high: float  # the upper end of that figure's 95% CI, over the figure
    resamples: int  # the run's timing.bootstrap_resamples (config.yaml)


@functools.lru_cache(maxsize=2)
def templates(data: Path = DATA) -> dict[str, list[Template]]:
    """The real bundles by kind, each validated with the front door's formulas installed (read once)."""
    install()
    out: dict[str, list[Template]] = {"matmul": [], "collectives": [], "link": []}
    for manifest in sorted(data.rglob(schema.MANIFEST)):
        folder = manifest.parent
        loaded = load_bundle(folder)
        if loaded.problems or loaded.bundle is None:
            raise SystemExit(f"{folder}: a template that does not validate: {loaded.problems[:2]}")
        b = loaded.bundle
        kind = "link" if folder.parent.name == "links" else str(b.manifest["workload"])
        figure = (best_tflops if kind == "matmul" else peak_busbw)(b, folder.name)
        ranks = (b.raw_rows[0].get("notes") or {}).get("rank_map") or []
        hosts = tuple(dict.fromkeys(str(r[0]) for r in ranks)) if kind == "link" else (b.manifest["suite"]["host"],)
        sums = tuple(line.split("  ", 1)[1] for line in (folder / schema.SUMS).read_text().splitlines())
        files = {name: (folder / name).read_bytes() for name in sums}
        resamples = settings_of(files[schema.CONFIG].decode()).resamples or BOOTSTRAP_RESAMPLES
        out[kind].append(Template(kind, str(folder.relative_to(data)), hosts, files, sums, figure.value,
                                  figure.high / figure.value, resamples))
    return out


def renamer(old: Sequence[str], new: Sequence[str], root_old: str, root_new: str) -> Callable[[str], str]:
    """Hosts (whole words) and the fleet folder's path, rewritten in a string."""
    table = dict(zip(old, new, strict=True))
    words = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, sorted(table, key=len, reverse=True)))
                       + r")(?![A-Za-z0-9])")
    return lambda text: words.sub(lambda m: table[m.group(1)], text).replace(root_old, root_new)


def walk(value: Any, rename: Callable[[str], str]) -> Any:
    """A copy of a JSON value with every string renamed."""
    if isinstance(value, str):
        return rename(value)
    if isinstance(value, dict):
        return {k: walk(v, rename) for k, v in value.items()}
    if isinstance(value, list):
        return [walk(v, rename) for v in value]
    return value


def _scaled(rec: dict[str, Any], k: float) -> None:
    """Every raw time of a samples record multiplied by k."""
    for name in ("samples", "warmup"):
        if isinstance(rec.get(name), list):
            rec[name] = [v * k for v in rec[name]]
    if isinstance(rec.get("rank_samples"), list):
        rec["rank_samples"] = [[v * k for v in r] for r in rec["rank_samples"]]


def rederive(row: dict[str, Any], rec: dict[str, Any], t: Template, devices: list[dict[str, Any]]) -> None:
    """What follows from the samples, as the engine's runner derives it (runner.py `_row`, `_figures`)."""
    summary = summarize(rec["samples"], t.resamples, rec.get("repeats"))
    row["time_s"] = summary.as_dict()
    if row.get("flops"):
        row.update(throughput(row["flops"], row.get("bytes") or 0, summary))
        achievable = {"tflops": row["achievable_tflops"]} if row.get("achievable_tflops") else None
        peak = Peak(row.get("peak_tflops"), row.get("peak_source"), row.get("peak_entry"), row.get("peak_note") or "")
        row.update(utilization(row["tflops"], peak, None if row.get("timing_valid") else row.get("timing_note"),
                               achievable))
    if rec.get("rank_samples"):
        combine = SimpleNamespace(rank_combine=row.get("rank_combine"))
        row.update(rank_fields(SimpleNamespace(rank_samples=rec["rank_samples"], prepared=combine)))
    # the workload's formulas at the new median (the collectives' algbw/busbw), planned from the template's config
    restated = restate_rows(t.files[schema.CONFIG].decode(), devices, [row], [rec])[0]
    row.update({k: v for k, v in restated.figures.items() if k in row and k != "comparability"})
    tel = row.get("telemetry")
    if isinstance(tel, dict) and "mfu_clock_adjusted" in tel:
        tel.update(efficiency(tel, row.get("tflops"), summary.median, row.get("mfu"), tel.get("peak_clock_mhz")))


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True, allow_nan=False) + "\n" for r in records).encode()  # writer.py's


def make_bundle(t: Template, dest: Path, rename: Callable[[str], str], k: float) -> None:
    """The template's bundle at `dest`, its times multiplied by k, its figures re-derived, names rewritten."""
    f = t.files
    env = walk(json.loads(f[schema.ENVIRONMENT]), rename)
    rows = [walk(json.loads(line), rename) for line in f[schema.CASES].splitlines()]
    recs = [walk(json.loads(line), rename) for line in f[schema.SAMPLES].splitlines()]
    for row, rec in zip(rows, recs, strict=True):
        if rec.get("samples") and row.get("time_s"):
            _scaled(rec, k)
            rederive(row, rec, t, env.get("devices") or [])
    out = {schema.MANIFEST: (json.dumps(walk(json.loads(f[schema.MANIFEST]), rename), indent=2, sort_keys=True)
                             + "\n").encode(),
           schema.CONFIG: rename(f[schema.CONFIG].decode()).encode(),
           schema.ENVIRONMENT: (json.dumps(env, indent=2, sort_keys=True, default=str) + "\n").encode(),
           schema.CASES: _jsonl(rows), schema.SAMPLES: _jsonl(recs), schema.TELEMETRY: f[schema.TELEMETRY]}
    dest.mkdir(parents=True)
    for name in t.sums:
        (dest / name).write_bytes(out[name])
    (dest / schema.SUMS).write_text("".join(f"{hashlib.sha256(out[n]).hexdigest()}  {n}\n" for n in t.sums))


@dataclass
class Plan:
    """What the generator makes: hosts, pairs, every node's and link's speed, and the planted faults."""

    hosts: list[str]
    pairs: list[tuple[str, str]]
    speed: dict[tuple[str, str], float]  # (kind, host or pair name) -> figure / the fleet's nominal figure
    slow_nodes: dict[str, float]
    slow_links: dict[str, float]
    missing_device: str
    not_run: str

    def expected(self) -> set[tuple[str, str]]:
        """(subject, reason code) of every finding the diagnosis should make, and no other."""
        return ({(h, "slow-matmul") for h in self.slow_nodes} | {(p, "slow-link") for p in self.slow_links}
                | {(self.missing_device, "missing-device"), (self.not_run, "could-not-run")})


def plan(n: int, faults: int, seed: int) -> Plan:
    rng = random.Random(seed)
    hosts = [f"node{i:04d}" for i in range(1, n + 1)]
    rounds = schedule.rounds("quick", n)
    pairs = [(hosts[a], hosts[b]) for r in rounds for a, b in r]
    speed = {(kind, h): rng.lognormvariate(0, SPREAD[kind]) for kind in ("matmul", "collectives") for h in hosts}
    speed.update({("link", f"pair-{a}-{b}"): rng.lognormvariate(0, SPREAD["link"]) for a, b in pairs})
    not_run, missing, *slow = rng.sample(hosts, 2 + faults)
    slow_nodes = {h: rng.uniform(*SLOW_NODE) for h in slow}
    # a slow link's nodes each keep a judged link that is not slow: a node whose every judged link is slow is
    # blamed itself (diagnose.link_findings), and the partners of the node that could not run have one judged link
    used = {not_run, *(hosts[i] for i in schedule.partners(rounds, hosts.index(not_run)))}
    slow_links: dict[str, float] = {}
    for a, b in rng.sample(pairs, len(pairs)):
        if len(slow_links) < faults and not {a, b} & used:
            slow_links[f"pair-{a}-{b}"] = rng.uniform(*SLOW_LINK)
            used |= {a, b}
    for h, s in slow_nodes.items():
        speed["matmul", h] *= 1 - s
    for p, s in slow_links.items():
        speed["link", p] *= 1 - s
    return Plan(hosts, pairs, speed, slow_nodes, slow_links, missing, not_run)


def _template(pool: list[Template], i: int, planted: bool) -> Template:
    usable = [t for t in pool if t.high <= DECIDABLE] if planted else pool
    return usable[i % len(usable)]


def _record(folder: Path, name: str, nodes: Sequence[str], rc: int, said: str = "") -> None:
    """A step record as the job script writes it (job.py STEP_FUNCTION), and its stderr."""
    data = {"name": name, "nodes": ",".join(nodes), "rc": rc, "started": "2026-12-02T03:19:05Z",
            "finished": "2026-12-02T03:21:00Z"}
    (folder / "steps" / f"{name}.json").write_text(json.dumps(data) + "\n")
    (folder / "steps" / f"{name}.err").write_text(said)


def generate(folder: Path, n: int = 1024, faults: int | None = None, seed: int = 0, data: Path = DATA) -> Plan:
    """The simulated fleet folder at `folder` (new) and `planted.json` beside it; returns the plan."""
    pools = templates(data)
    install()  # as `xmfu` does: every bundle loaded in this process is checked against the formulas
    p = plan(n, max(2, n // 128) if faults is None else faults, seed)
    real = json.loads((data / spec.SPEC_FILE).read_text())
    root_old = str(Path(real["results_dir"]) / real["fleet_id"])
    folder.mkdir(parents=True)
    (folder / "steps").mkdir()
    spec.write(spec.FleetSpec(folder.name, n, "quick", "quick", str(folder.parent), created="2026-12-02T03:19:04Z"))
    (folder / "nodes.txt.1").write_text("\n".join(p.hosts) + "\n")
    reference = {kind: sorted(t.figure for t in pool)[len(pool) // 2] for kind, pool in pools.items()}
    work = []  # (template, destination, rename, time factor), made grouped by template (the formulas' cache)
    for i, host in enumerate(p.hosts):
        if host == p.not_run:
            _record(folder, f"node-{host}", [host], 143, TIME_LIMIT.format(step=i, host=host))
            continue
        _record(folder, f"node-{host}", [host], 0)
        for kind in ("matmul", "collectives"):
            t = _template(pools[kind], i, host in p.slow_nodes)
            rename = renamer(t.hosts, [host], root_old, str(folder))
            work.append((t, folder / rename(t.relative), rename, t.figure / (reference[kind] * p.speed[kind, host])))
        _node_json(data, folder, host, DEVICES - (host == p.missing_device), root_old)
    for j, (a, b) in enumerate(p.pairs):
        name = f"pair-{a}-{b}"
        if p.not_run in (a, b):
            _record(folder, name, [a, b], 1, f"srun: error: Unable to create step for job 1: {p.not_run} timed out\n")
            continue
        _record(folder, name, [a, b], 0)
        t = _template(pools["link"], j, name in p.slow_links)
        rename = renamer(t.hosts, [a, b], root_old, str(folder))
        work.append((t, folder / rename(t.relative), rename, t.figure / (reference["link"] * p.speed["link", name])))
    for t, dest, rename, k in sorted(work, key=lambda w: w[0].relative):
        make_bundle(t, dest, rename, k)
    _write_planted(folder, p, seed)
    return p


def _node_json(data: Path, folder: Path, host: str, devices: int, root_old: str) -> None:
    source = next(data.glob("nodes/*/*/node.json"))
    node = json.loads(source.read_text())
    node = walk(node, renamer([node["host"]], [host], root_old, str(folder)))
    first = node["platform"]["devices"][0]
    node["platform"]["devices"] = [{**first, "index": i} for i in range(devices)]
    (folder / "nodes" / host / host).mkdir(parents=True, exist_ok=True)
    (folder / "nodes" / host / host / "node.json").write_text(json.dumps(node, indent=1) + "\n")


def _write_planted(folder: Path, p: Plan, seed: int) -> None:
    planted = {"folder": str(folder), "nodes": len(p.hosts), "seed": seed, "spread": SPREAD,
               "slow_nodes": p.slow_nodes, "slow_links": p.slow_links, "missing_device": p.missing_device,
               "could_not_run": p.not_run, "expected": sorted([s, c] for s, c in p.expected())}
    (folder.parent / "planted.json").write_text(json.dumps(planted, indent=1) + "\n")


def _tree(pid: int) -> list[int]:
    """The process and its descendants (Linux /proc/PID/task/TID/children)."""
    out, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                frontier += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return out


def _memory_kb(pid: int) -> int:
    """A process's proportional set size (shared pages split among their sharers: forked workers share the
    parent's), from /proc/PID/smaps_rollup; its VmRSS where that is not readable."""
    for name, key in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
                if line.startswith(key):
                    return int(line.split()[1])
        except (OSError, ValueError):
            continue
    return 0


def timed(args: Sequence[str]) -> tuple[float, float, float, float, int]:
    """(wall s, CPU s, largest process's peak RSS MB, peak of all its processes' PSS together MB, exit status) of
    `python -m xmfu ARGS` as a child. CPU and ru_maxrss from wait4 (the child and the workers it reaped); the
    processes' sum sampled every 0.1 s."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "xmfu", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            peak[0] = max(peak[0], sum(_memory_kb(p) for p in _tree(child.pid)))

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    watcher.join()
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, peak[0] / 1024, \
        os.waitstatus_to_exitcode(status)


def found(folder: Path) -> set[tuple[str, str]]:
    """(subject, reason code) of every finding `xmfu fleet report` wrote in verdict.json."""
    return {(f["subject"], f["code"]) for f in json.loads((folder / "verdict.json").read_text())["findings"]}


def _validate_sample(folder: Path, count: int, seed: int) -> str:
    bundles = sorted(str(m.parent) for m in folder.rglob(schema.MANIFEST))
    sample = random.Random(seed).sample(bundles, min(count, len(bundles)))
    run = subprocess.run([sys.executable, "-m", "xmfu", "validate", *sample], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    valid = run.stdout.count(": valid\n")
    return f"xmfu validate: {valid} of {len(sample)} sampled bundles valid (exit {run.returncode})"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--faults", type=int, help="slow nodes, and slow links, planted (default: N/128, at least 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3, help="timed `xmfu fleet report` runs")
    ap.add_argument("--validate", type=int, default=8, help="bundles checked with `xmfu validate`")
    ap.add_argument("--out", help="make the fleet under this folder and keep it (default: a temporary one)")
    ns = ap.parse_args(argv)
    work = Path(ns.out) if ns.out else Path(tempfile.mkdtemp(prefix="xmfu-fleet-sim-"))
    folder = work / f"sim-{ns.nodes}-seed{ns.seed}"
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    start = time.perf_counter()
    p = generate(folder, ns.nodes, ns.faults, ns.seed)
    bundles = sum(1 for _ in folder.rglob(schema.MANIFEST))
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20
    print(f"generated {ns.nodes} nodes, {len(p.pairs)} links, {bundles} bundles ({size:.0f} MB) in "
          f"{time.perf_counter() - start:.0f} s: {folder}\nplanted: {len(p.slow_nodes)} slow-matmul, "
          f"{len(p.slow_links)} slow-link, 1 missing-device, 1 could-not-run ({work / 'planted.json'})")
    print(_validate_sample(folder, ns.validate, ns.seed), flush=True)
    ok = True
    for run in range(1, ns.runs + 1):
        wall, cpu, one, total, rc = timed(["fleet", "report", str(folder)])
        print(f"xmfu fleet report, run {run}: {wall:.1f} s wall, {cpu:.1f} s CPU, peak memory {total:.0f} MB "
              f"(all its processes, PSS; largest one's RSS {one:.0f} MB), exit {rc}; load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        want, got = p.expected(), found(folder)
        ok = ok and want == got
        print(f"  diagnosis: {len(want & got)} of {len(want)} planted faults found, missed {sorted(want - got)}, "
              f"false positives {sorted(got - want)}")
    if not ns.out:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
