"""The jobs of a suite's parts: composed and validated before anything runs, then run in this process through
`xmfu.harness.run.execute`, or, for collectives over a node's devices without a launcher, under torchrun in child
processes (`python -m xmfu.harness.suites.parts JOB.json` is what each child runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from xmfu.harness.config.hydra_app import UsageError, compose_job
from xmfu.harness.config.run_settings import apply_scale, explicit_keys, parse_run_config
from xmfu.harness.config.suite_spec import Part
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.plugins import register_named
from xmfu.harness.engine.registry import Registry
from xmfu.harness.engine.settings import RunConfig, SuiteTag

PROJECT_ROOT = Path(__file__).resolve().parent.parent
JOBS_FOLDER = ".jobs"  # in a suite's folder: what each child process of a torchrun part runs


@dataclass(frozen=True)
class Job:
    part: Part
    overrides: tuple[str, ...]  # everything the run was composed from, its results_dir and run_id included
    cfg: RunConfig
    config_yaml: str

    @property
    def folder(self) -> Path:
        return Path(self.cfg.results_dir) / str(self.cfg.run_id)


@dataclass
class PartOutcome:
    name: str
    kind: str
    what: str
    exit_code: int | None = None  # None: not run on this host
    seconds: float = 0.0
    bundles: list[str] = field(default_factory=list)  # relative to the suite's folder
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


SMOKE = "scale=smoke"


def compose(overrides: Sequence[str], registry: Registry, tag: SuiteTag) -> tuple[RunConfig, str]:
    """(the run's config, its resolved YAML) exactly as `xmfu run OVERRIDES` would have them, tagged with
    the suite. Raises UsageError (composition) or ConfigError (values)."""
    from omegaconf import OmegaConf

    from xmfu.harness.run import plan_phases

    data, _ = compose_job(list(overrides))
    register_named(registry, data)  # a part may name plug-in backends, as a run may
    explicit = _explicit(overrides)
    cfg = replace(parse_run_config(data, registry.backends_by_workload(), explicit), suite=tag)
    plan_phases(cfg, registry)  # sizes are checked when they expand into cases
    return cfg, OmegaConf.to_yaml(OmegaConf.create(apply_scale(data, explicit).data))


def _explicit(overrides: Sequence[str]) -> set[str]:
    """The settings that win over the smoke sizes. At smoke sizes a part's own overrides are its full sizes (the
    nightly attention part's seq_q=4096): only what follows `scale=smoke` (the part's smoke overrides, then the
    command line's) is kept over them (plan_part puts the part's overrides first)."""
    listed = list(overrides)
    if SMOKE in listed:
        listed = listed[listed.index(SMOKE) + 1:]
    return explicit_keys(listed)


def plan_part(part: Part, smoke: bool, shared: Sequence[str], folder: Path, tag: SuiteTag, devices: int,
              registry: Registry) -> list[Job]:
    """The jobs of one part: one, or one per local device for `devices` parts. A bad override is a
    UsageError naming the part, before anything runs."""
    base = [*part.overrides, *((SMOKE, *part.smoke) if smoke else ()), *shared]
    indices: Sequence[int | None] = range(devices) if part.kind == "devices" else [None]
    jobs = []
    for index in indices:
        run_id = f"{tag.suite_id}-{tag.host}-{part.name}" if part.kind != "ranks" else f"{tag.suite_id}-{part.name}"
        extra = [f"results_dir={folder}", f"run_id={run_id}" + ("" if index is None else f"-dev{index}")]
        if index is not None:
            extra.append(f"device_index={index}")
        overrides = (*base, *extra)
        try:
            cfg, text = compose(overrides, registry, replace(tag, part=part.name))
        except (UsageError, ConfigError) as exc:
            raise UsageError(f"suite part {part.name} ({' '.join(base)}): {exc}") from None
        jobs.append(Job(part, overrides, cfg, text))
    return jobs


def run_in_process(job: Job, registry: Registry, argv: Sequence[str]) -> int:
    """One job through `execute`; a crash is this part's failure, never the suite's end (KeyboardInterrupt
    aside)."""
    from xmfu.harness.machine.platform import NoAcceleratorError
    from xmfu.harness.run import SetupError, execute

    try:
        return execute(job.cfg, registry, job.config_yaml, argv, list(job.overrides)).exit_code
    except (NoAcceleratorError, SetupError) as exc:
        print(f"xmfu: suite part {job.part.name}: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug or a broken stack in one part; the other parts still run
        print(f"xmfu: suite part {job.part.name} crashed: {type(exc).__name__}: {exc}\n{traceback.format_exc()}",
              file=sys.stderr)
        return 1


def torchrun_command(job_file: Path, nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "xmfu.harness.suites.parts", str(job_file)]


def run_under_torchrun(job: Job, nproc: int, argv: Sequence[str]) -> int:
    """One process per device of this node (torchrun --standalone), each running the job; rank 0 writes it."""
    job_file = job.folder.parent / JOBS_FOLDER / f"{job.cfg.run_id}.json"
    job_file.parent.mkdir(parents=True, exist_ok=True)
    tag = asdict(job.cfg.suite) if job.cfg.suite else None
    job_file.write_text(json.dumps({"overrides": list(job.overrides), "suite": tag, "argv": list(argv)}, indent=1))
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(torchrun_command(job_file, nproc), env={**os.environ, "PYTHONPATH": path}, check=False)
    return proc.returncode


def ranks_mode(world_size: int, devices: int, has_accelerator: bool) -> tuple[str, int]:
    """How a `ranks` part runs: ("here", n) in this process, every rank of a launcher taking part; or
    ("torchrun", n) over this node's n devices (two gloo processes on a CPU, to run the real plumbing)."""
    if world_size > 1:
        return "here", world_size
    nproc = devices if has_accelerator else 2
    return ("torchrun", nproc) if nproc > 1 else ("here", 1)


LAUNCHER_IDENTITY = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
                     "SLURM_LOCALID": "0"}


@contextmanager
def one_process(world_size: int) -> Iterator[None]:
    """Run a single-device part as a process of its own, though a launcher started this one: rank 0 of 1, so
    it writes its bundle and waits for no other rank (xmfu.harness.machine.ranks reads these variables)."""
    if world_size < 2:
        yield
        return
    saved = {k: os.environ.get(k) for k in LAUNCHER_IDENTITY}
    os.environ.update(LAUNCHER_IDENTITY)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def barrier(folder: Path, rank: int, world_size: int, timeout_s: float, poll_s: float = 2.0) -> list[int]:
    """Mark this rank done in the shared suite folder and wait for every rank; returns the ranks that did
    not arrive within `timeout_s` (a node that died, or a results_dir that is not shared between nodes)."""
    marks = folder / ".done"
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"rank-{rank}").write_text(f"{time.time()}\n")
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [r for r in range(world_size) if not (marks / f"rank-{r}").exists()]
        left = deadline - time.monotonic()
        if not missing or left <= 0:
            return missing
        time.sleep(min(poll_s, left))


def _child(job_file: Path) -> int:
    """A torchrun child: compose the job it was given and run it (every rank; rank 0 writes the bundle)."""
    from xmfu.workloads.catalog import build_registry

    spec = json.loads(job_file.read_text())
    registry = build_registry()
    tag = SuiteTag(**spec["suite"]) if spec.get("suite") else None
    cfg, text = compose(spec["overrides"], registry, tag)  # type: ignore[arg-type]
    part = Part(tag.part if tag else "part", "ranks", "", tuple(spec["overrides"]), ())
    return run_in_process(Job(part, tuple(spec["overrides"]), cfg, text), registry, spec["argv"])


if __name__ == "__main__":
    sys.exit(_child(Path(sys.argv[1])))
