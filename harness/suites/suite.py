"""`xmfu run experiment=acceptance` and `xmfu run experiment=nightly store=PATH`: a suite of runs as one command.

The experiment overlay sets `suite:` (harness/config/suite_spec.py); `xmfu run` hands such a config here instead of
to Hydra's launcher. Every part's jobs are composed and validated first (bad input: one paragraph, exit 2,
nothing run), then:

- in one process (no launcher): `xmfu doctor`'s checks, then the parts in order, each through
  `xmfu.harness.run.execute` in this process (collectives over the node's devices under torchrun, in children);
- under torchrun or Slurm (every rank runs this): the `ranks` parts first, every rank together; then each
  node's local rank 0 runs the doctor checks and the single-device parts on its own devices, as a process of
  its own, with results under a folder per host; every rank then marks itself done in the shared results
  folder, and rank 0, once all have, builds the report from that folder.

Output: `<results_dir>/<suite id>/` holding `<host>/node.json` (doctor findings, each part's outcome),
the bundles, `report.html` (the verdict page first) and `suite.json`. With `store=PATH` the bundles are
appended to that history store and `history check` judges them (harness/suites/nightly.py).

The first line printed at the end, of suite.json (`judgement`) and of the report is the verdict: PASS, FAIL or NOT
JUDGED with its reasons (harness/suites/judgement.py). Exit status: 0 PASS (every part ran, no device was an
outlier, no regression, no headline figure far below its public reference (docs/references.md), and no row's figure
discounted by its own flags); 1 FAIL (each problem named); 3 NOT JUDGED
(no problem found, but rows were contended or not validly timed, or a change was discounted); 2 for invalid input;
130 when interrupted.
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xmfu.harness.config.hydra_app import MULTIRUN_FLAGS, UsageError, compose_job, split_args, split_jobs
from xmfu.harness.config.run_settings import RunSettings, parse_results_dir, parse_run_id
from xmfu.harness.config.suite_spec import SuiteSpec, parse_suite, shared_overrides
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.registry import Registry
from xmfu.harness.engine.settings import SuiteTag
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.platform import NoAcceleratorError, Platform, detect
from xmfu.harness.machine.ranks import ProcessInfo, process_info
from xmfu.harness.results.analysis.cost import EnergyPrice, energy_price, ownership_price
from xmfu.harness.results.bundle.writer import checked
from xmfu.harness.results.schema.records import NodeRecord
from xmfu.harness.suites.parts import (
    Job,
    PartOutcome,
    barrier,
    one_process,
    plan_part,
    ranks_mode,
    run_in_process,
    run_under_torchrun,
)

INFO_FLAGS = ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help", "-sc", "--shell-completion")
NODE_RECORD = "node.json"


@dataclass(frozen=True)
class Settings:
    results_dir: str
    run_id: str | None
    device: str
    price: float | None  # USD per device-hour (given, or from capex_usd over amortize_years)
    store: str | None
    energy: EnergyPrice | None = None  # price_kwh and pue: the cost's energy line
    price_source: str | None = None  # where price comes from: price=, or the ownership mode's capex


@dataclass
class Plan:
    spec: SuiteSpec
    settings: Settings
    suite_id: str
    root: Path
    host: str
    smoke: bool
    scale_reason: str
    jobs: dict[str, list[Job]] = field(default_factory=dict)  # part name -> its jobs


def maybe_run(args: Sequence[str], registry: Registry) -> int | None:
    """Run the suite the command line's config names; None when it names none (a plain `xmfu run`)."""
    overrides = split_args(args)
    if any(a in INFO_FLAGS for a in args) or not any(_may_set_suite(o) for o in overrides):
        return None
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    data, _ = compose_job(split_jobs(overrides, multirun)[0])
    if data.get("suite") is None:
        return None
    if multirun:
        raise UsageError("a suite (experiment=acceptance, experiment=nightly) runs its parts itself: run it "
                         "without -m")
    try:
        spec, settings = with_run_scale(parse_suite(data["suite"]), data.get("scale")), _settings(data)
    except ConfigError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    if spec.needs_store and settings.store is None:
        raise UsageError(f"store: the {spec.name} suite appends to a history store. Allowed: store=PATH "
                         "(a folder; created on the first run)")
    if settings.store is not None:
        _check_store(settings.store)
    return run(spec, settings, shared_overrides(overrides), ["xmfu", "run", *args], registry)


def _may_set_suite(override: str) -> bool:
    """Only an experiment overlay, or `suite` itself, can set a suite (the default config has none)."""
    return override.lstrip("+~").split("=", 1)[0].split(".", 1)[0] in ("experiment", "suite")


def _settings(data: dict[str, Any]) -> Settings:
    s = parse_section("", RunSettings, data)
    # `store=` and `store=''` (what `store=$UNSET` expands to) would run the suite, store nothing, check nothing
    if s.store is not None and (not str(s.store).strip() or Path(s.store).is_file()):
        raise ConfigError("store", f"{s.store!r} is not a folder", "a folder of Parquet files (created if missing)")
    price, source = _device_hour_price(s)
    try:
        energy = energy_price(s.price_kwh, s.pue)
    except ValueError as exc:
        problem, _, allowed = str(exc).partition(". Allowed: ")  # cost.energy_price names both
        raise ConfigError("pue" if "pue" in problem.split()[0] else "price_kwh", problem, allowed) from None
    return Settings(results_dir=parse_results_dir(s.results_dir), run_id=parse_run_id(s.run_id), device=s.device,
                    price=price, store=s.store, energy=energy, price_source=source)


def _device_hour_price(s: RunSettings) -> tuple[float | None, str | None]:
    """price= as given, or the ownership mode's capex_usd over amortize_years (cost.ownership_price)."""
    if s.capex_usd is None and s.amortize_years is None:
        return s.price, "price=" if s.price else None
    if s.capex_usd is None or s.amortize_years is None or s.price is not None:
        raise ConfigError("capex_usd", "the ownership mode needs capex_usd= and amortize_years= together, and no "
                          "price=", "capex_usd=USD_PER_DEVICE amortize_years=N (or price=USD_PER_DEVICE_HOUR)")
    return (ownership_price(s.capex_usd, s.amortize_years),
            f"ownership: USD {s.capex_usd:g} per device over {s.amortize_years:g} years, energy apart")


def _check_store(store: str) -> None:
    """The store must take tonight's bundles before the suite spends its hours: checked first, bad input if not."""
    from xmfu.harness.results.history import parquet

    try:
        parquet.check_writable(Path(store))
    except (parquet.StoreError, RuntimeError) as exc:  # RuntimeError: pyarrow missing
        raise UsageError(f"store={store}: {exc}") from None


def host_name() -> str:
    """This node's name as a folder and run-id fragment (letters, digits, '.', '_', '-'; 40 at most)."""
    short = socket.gethostname().split(".")[0]
    return re.sub(r"[^A-Za-z0-9_-]+", "-", short)[:40].strip("-_") or "host"


def suite_id(name: str, run_id: str | None, proc: ProcessInfo, environ: dict[str, str]) -> str:
    """run_id when given; under a launcher, the job's id, which every rank shares without talking (Slurm's job
    and step, or torchrun's rendezvous id); else a fresh UTC stamp and random suffix."""
    if run_id:
        return run_id
    job = "_".join(environ[k] for k in ("SLURM_JOB_ID", "SLURM_STEP_ID") if environ.get(k)) or environ.get(
        "TORCHELASTIC_RUN_ID", "")
    if proc.world_size > 1 and job:
        return f"{name}-{re.sub(r'[^A-Za-z0-9_-]+', '-', job)}"[:80]
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{name}-{secrets.token_hex(3)}"


def with_run_scale(spec: SuiteSpec, scale: Any) -> SuiteSpec:
    """`scale=smoke` is one switch for every run, a suite's too: it means suite.scale=smoke, so every part runs
    its `smoke` overrides (without this, each part got scale=smoke alone and missed them). Asking for both
    scale=smoke and suite.scale=full is refused rather than one of them silently winning."""
    if scale != "smoke" or spec.scale == "smoke":
        return spec
    if spec.scale == "full":
        raise ConfigError("scale", "is smoke while suite.scale is full: the two ask for opposite sizes",
                          "scale=smoke (every part at its smoke sizes), or suite.scale=full without scale=smoke")
    return replace(spec, scale="smoke")


def scale_of(spec: SuiteSpec, plat: Platform) -> tuple[bool, str]:
    """(smoke sizes?, why), said in the output and the report."""
    if spec.scale == "smoke":
        return True, "smoke sizes (scale=smoke or suite.scale=smoke)"
    if spec.scale == "full":
        return False, "full sizes (suite.scale=full)"
    if plat.has_accelerator:
        return False, f"full sizes ({plat.reason})"
    return True, (f"smoke sizes: no accelerator is visible ({plat.reason}), so every part runs at the sizes that "
                  "prove the plumbing on this CPU (suite.scale=full overrides)")


def plan(spec: SuiteSpec, settings: Settings, shared: Sequence[str], registry: Registry, plat: Platform,
         proc: ProcessInfo, environ: dict[str, str]) -> Plan:
    smoke, why = scale_of(spec, plat)
    sid = suite_id(spec.name, settings.run_id, proc, environ)
    host = host_name()
    out = Plan(spec, settings, sid, Path(settings.results_dir) / sid, host, smoke, why)
    tag = SuiteTag(spec.name, spec.version, spec.definition_sha, sid, "", host)
    for part in spec.parts:
        folder = out.root if part.kind == "ranks" else out.root / host
        out.jobs[part.name] = plan_part(part, smoke, shared, folder, tag, len(plat.devices), registry)
    return out


def run(spec: SuiteSpec, settings: Settings, shared: Sequence[str], argv: Sequence[str], registry: Registry) -> int:
    import os

    proc = process_info()
    try:
        plat = detect(settings.device)
    except NoAcceleratorError as exc:
        raise UsageError(str(exc)) from None
    p = plan(spec, settings, shared, registry, plat, proc, dict(os.environ))
    leader = proc.local_rank == 0
    if proc.rank == 0:
        print(f"xmfu suite {spec.name} v{spec.version} ({spec.definition_sha}): {p.suite_id}, {p.scale_reason}; "
              f"parts: {', '.join(part.name for part in spec.parts)}; writing {p.root}", flush=True)
    started = time.time()
    doctor = Doctor(settings.device) if spec.doctor and leader else None
    outcomes, interrupted = _run_parts(p, proc, plat, argv, registry, leader, doctor)
    if leader:
        _write_node(p, plat, outcomes, doctor.found if doctor else None, started)
    missing = barrier(p.root, proc.rank, proc.world_size, spec.barrier_timeout_s)
    if proc.rank != 0:
        return 130 if interrupted else 0
    return _finish(p, outcomes, missing, interrupted)


def _plain(value: Any) -> Any:
    """suite.json's view of what json cannot write itself: a record by its own as_dict (the references' figures,
    yardsticks.Yardstick), anything else as text."""
    return value.as_dict() if hasattr(value, "as_dict") else str(value)


def _order(p: Plan, proc: ProcessInfo) -> list[str]:
    """Under a launcher the parts that span ranks go first, while every rank is still in step."""
    names = [part.name for part in p.spec.parts]
    if proc.world_size < 2:
        return names
    return sorted(names, key=lambda n: p.jobs[n][0].part.kind != "ranks")


def _run_parts(p: Plan, proc: ProcessInfo, plat: Platform, argv: Sequence[str], registry: Registry,
               leader: bool, doctor: Doctor | None) -> tuple[list[PartOutcome], bool]:
    outcomes = []
    for name in _order(p, proc):
        jobs = p.jobs[name]
        part = jobs[0].part
        if part.kind != "ranks" and not leader:
            continue
        if doctor and (part.kind != "ranks" or proc.world_size < 2):
            doctor.run()  # before the node's own parts; under a launcher, after those spanning ranks
        if proc.rank == 0 or (leader and part.kind != "ranks"):
            print(f"xmfu suite: part {name} ({part.kind}): {part.what}", flush=True)
        outcome = _run_part(jobs, p, proc, plat, argv, registry)
        outcomes.append(outcome)
        if outcome.exit_code == 130:
            return outcomes, True
    if doctor:
        doctor.run()  # every part spanned ranks
    return outcomes, False


def _run_part(jobs: list[Job], p: Plan, proc: ProcessInfo, plat: Platform, argv: Sequence[str],
              registry: Registry) -> PartOutcome:
    part = jobs[0].part
    outcome = PartOutcome(part.name, part.kind, part.what)
    start = time.perf_counter()
    codes = []
    try:
        for job in jobs:
            if part.kind == "ranks":
                mode, nproc = ranks_mode(proc.world_size, len(plat.devices), plat.has_accelerator)
                outcome.note = f"{nproc} processes" + (" under torchrun (this node's devices)" if mode == "torchrun"
                                                      else "")
                code = run_under_torchrun(job, nproc, argv) if mode == "torchrun" else run_in_process(job, registry,
                                                                                                       argv)
            else:
                with one_process(proc.world_size):
                    code = run_in_process(job, registry, argv)
            codes.append(code)
            if (job.folder / "manifest.json").exists():
                outcome.bundles.append(str(job.folder.relative_to(p.root)))
            if code == 130:
                break
    except KeyboardInterrupt:
        codes.append(130)
    outcome.exit_code = 130 if 130 in codes else max(codes, default=1)
    outcome.seconds = time.perf_counter() - start
    return outcome


class Doctor:
    """`xmfu doctor`'s checks, run once, the first time they are asked for; the findings go into the node's
    record and onto the verdict page."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.found: dict[str, Any] | None = None

    def run(self) -> None:
        if self.found is None:
            self.found = diagnose_node(self.device)


def diagnose_node(device: str) -> dict[str, Any]:
    from xmfu.harness.suites.doctor import diagnose

    print("xmfu suite: doctor's checks", flush=True)
    try:
        found = diagnose("cpu" if device == "cpu" else "auto")
    except Exception as exc:  # the doctor failing is itself worth recording; the suite's figures stand
        return {"facts": {}, "problems": [f"doctor could not run: {type(exc).__name__}: {exc}"]}
    return {"facts": found.facts, "problems": found.problems, "notes": found.notes}


def _write_node(p: Plan, plat: Platform, outcomes: list[PartOutcome], doctor: dict[str, Any] | None,
                started: float) -> None:
    record = {"host": p.host, "suite": {"name": p.spec.name, "version": p.spec.version,
                                        "definition_sha": p.spec.definition_sha, "suite_id": p.suite_id},
              "scale": "smoke" if p.smoke else "full", "scale_reason": p.scale_reason,
              "platform": {"kind": plat.kind, "reason": plat.reason,
                           "devices": [{k: d.as_dict()[k] for k in ("index", "name", "uuid", "pci_bus_id")}
                                       for d in plat.devices]},
              "doctor": doctor, "parts": [o.as_dict() for o in outcomes],
              "started": _iso(started), "finished": _iso(time.time())}
    folder = p.root / p.host
    folder.mkdir(parents=True, exist_ok=True)
    record = checked(json.loads(json.dumps(record, default=str)), NodeRecord, NODE_RECORD)  # as it will be read
    (folder / NODE_RECORD).write_text(json.dumps(record, indent=1) + "\n")


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def _finish(p: Plan, outcomes: list[PartOutcome], missing: list[int], interrupted: bool) -> int:
    """Rank 0, every rank done (or given up on): the store, the report, the summary and the exit status. The store
    is judged before the report is built, so that the verdict's first line (PASS / FAIL / NOT JUDGED) weighs its
    regressions too."""
    from xmfu.harness.machine.references import Bands
    from xmfu.harness.suites import suite_report

    problems = []
    if missing:
        problems.append(f"ranks {missing} never marked themselves done within {p.spec.barrier_timeout_s:g} s (a node "
                        "that died, or a results_dir that is not shared between nodes): their results are missing")
    problems += [f"part {o.name} exited {o.exit_code}" for o in outcomes if o.exit_code not in (0, None, 130)]
    unreliable: list[str] = []
    history: dict[str, Any] | None = None  # the store's judgement: rule, each series' state (nightly.py)
    if p.settings.store and not interrupted:
        from xmfu.harness.suites.nightly import append_and_check

        judged = append_and_check(Path(p.settings.store), p.root, p.spec.check, p.spec.strict)
        problems += judged.problems
        unreliable = judged.unreliable
        history = judged.record.as_dict() if judged.record else None
    bands = Bands(p.spec.reference_within, p.spec.reference_far_below)
    html, verdict = suite_report.build(p.root, p.settings.price, p.spec.outlier_threshold, problems, unreliable, bands,
                                       p.settings.energy)
    (p.root / "report.html").write_text(html)
    problems = verdict["problems"] + problems
    summary = {"judgement": verdict["judgement"], "suite": asdict(p.spec), "suite_id": p.suite_id,
               "scale_reason": p.scale_reason, "price_usd_per_device_hour": p.settings.price,
               "price_source": p.settings.price_source,
               "energy_price": asdict(p.settings.energy) if p.settings.energy else None,
               "store": p.settings.store, "verdict": verdict, "problems": problems, "unreliable": unreliable,
               "history": history}
    (p.root / "suite.json").write_text(json.dumps(summary, indent=1, default=_plain) + "\n")
    print(verdict["judgement"]["line"])  # the first line of the summary, as of the page
    for line in verdict["headlines"]:
        print(f"verdict: {line}")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    for line in unreliable:  # reported, not failing the night (suite.strict=true makes them problems)
        print(f"NOTE: {line}")
    print(f"report: {p.root / 'report.html'}", flush=True)
    if interrupted:
        print("xmfu: interrupted; the finished parts are kept and reported", file=sys.stderr)
    return exit_status(verdict["judgement"]["verdict"], interrupted, p.spec.not_judged_fails)


NOT_JUDGED_EXIT = 3  # neither a pass (0) nor a failure found (1): the run's own evidence says it proves nothing


def exit_status(verdict: str, interrupted: bool, not_judged_fails: bool = True) -> int:
    """130 interrupted; 1 FAIL (a problem found); 3 NOT JUDGED (rows contended, or none validly timed:
    harness/suites/judgement.py), 0 instead with suite.not_judged_fails=false; 0 PASS."""
    if interrupted:
        return 130
    return {"FAIL": 1, "NOT JUDGED": NOT_JUDGED_EXIT if not_judged_fails else 0}.get(verdict, 0)
