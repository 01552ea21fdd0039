"""Submitting a fleet job and waiting for it: the folder made, the script written and handed to sbatch, then the
job watched (progress from the step records it writes: nodes done, pairs done, an ETA) until Slurm says it ended.
Every wait is bounded: by the job's own time limit plus a grace, after which the job is left to Slurm and the folder
judged as it stands. Ctrl-C stops the watching, never the job."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from xmfu.harness.fleet import job, slurm
from xmfu.harness.fleet.spec import AGAIN, FleetSpec, write

POLL_S = 5.0
GRACE_S = 300.0  # past the job's time limit: for Slurm to end it and the file system to show its last records
QUEUE_LIMIT_S = 3600.0  # waiting for the job to start; --queue-limit changes it
JOBS_FILE = "jobs.json"


@dataclass(frozen=True)
class Submitted:
    job_id: str
    script: Path
    steps: tuple[str, ...]  # the names of the steps the job runs (the resumed ones only, on resume)
    minutes: int  # the job's time limit
    at: float  # when it was submitted (time.time()): step records written since are this job's


def _expected(script_text: str) -> tuple[str, ...]:
    """The step names a script runs, as written (`step "NAME" ...`); `${NODES[i]}` stays unexpanded. The checks
    again (job.again_lines: `node-$host-again`, one line for however many nodes are flagged) are not counted."""
    names = (line.split('"')[1] for line in script_text.splitlines() if line.lstrip().startswith('step "'))
    return tuple(n for n in names if not _again(n))


def _again(name: str) -> bool:
    return name.endswith(f"-{AGAIN}")


def submit(spec: FleetSpec, hosts: Sequence[str] = (), names: Sequence[str] | None = None,
           test_only: bool = False) -> Submitted | str:
    """Write the job's script into the fleet folder and submit it (`test_only`: sbatch --test-only's answer)."""
    spec.folder.mkdir(parents=True, exist_ok=True)
    write(spec)
    text = job.script(spec, hosts, names)
    minutes = next(int(line.split("=", 1)[1]) for line in text.splitlines() if line.startswith("#SBATCH --time="))
    script = spec.folder / f"job-{len(list(spec.folder.glob('job-*.sbatch'))) + 1}.sbatch"
    script.write_text(text)
    if test_only:
        return slurm.submit(script, test_only=True)
    at = time.time()
    job_id = slurm.submit(script)
    record = spec.folder / JOBS_FILE
    jobs = json.loads(record.read_text()) if record.is_file() else []
    jobs.append({"job_id": job_id, "script": script.name, "minutes": minutes})
    record.write_text(json.dumps(jobs, indent=2) + "\n")
    return Submitted(job_id, script, _expected(text), minutes, at)


def progress_line(folder: Path, sub: Submitted, started: float, now: float) -> str:
    """Steps ended of those the job runs, by kind (its step records written since it was submitted)."""
    records = [p.stem for p in (folder / job.STEPS).glob("*.json") if p.stat().st_mtime >= sub.at - 1]
    ended = [n for n in records if not _again(n)]
    done = {k: sum(1 for n in ended if n.startswith(k + "-")) for k in ("node", "pair", "all")}
    want = {k: sum(1 for n in sub.steps if n.startswith(k + "-")) for k in done}
    share = len(ended) / len(sub.steps) if sub.steps else 0.0
    elapsed = now - started
    eta = f", ETA {_clock(elapsed / share - elapsed)}" if 0 < share < 1 else ""
    again = len(records) - len(ended)
    return (f"xmfu fleet: job {sub.job_id}: nodes {done['node']}/{want['node']}, pairs {done['pair']}/{want['pair']}, "
            f"all-node steps {done['all']}/{want['all']}{f', {again} checked again' if again else ''}, "
            f"{_clock(elapsed)} elapsed{eta}")


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def wait(folder: Path, sub: Submitted, queue_limit_s: float = QUEUE_LIMIT_S, say: Callable[[str], None] = print,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> slurm.JobState:
    """Until Slurm says the job ended; or, bounded: its time limit and a grace past its start, or `queue_limit_s` in
    the queue without starting (a cluster whose nodes are down or busy). Progress is said when it changes."""
    started = clock()
    running: float | None = None
    last = ""
    while True:
        state = slurm.state(sub.job_id)
        line = progress_line(folder, sub, started, clock())
        if state.state == "PENDING":
            line = f"xmfu fleet: job {sub.job_id}: queued ({state.reason}), {_clock(clock() - started)} so far"
        if line.split(", ")[:3] != last.split(", ")[:3]:
            say(line)
            last = line
        if not state.active:
            return state
        if state.state != "PENDING" and running is None:
            running = clock()
        if running is None and clock() - started > queue_limit_s:
            return slurm.JobState(sub.job_id, "PENDING", f"still queued after {queue_limit_s / 60:.0f} minutes "
                                  f"(Slurm: {state.reason}): left in the queue")
        if running is not None and clock() > running + sub.minutes * 60 + GRACE_S:
            return slurm.JobState(sub.job_id, state.state, f"still {state.state} {GRACE_S:.0f} s past its time limit: "
                                  "left to Slurm; the folder is judged as it stands")
        sleep(POLL_S)


def say_err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
