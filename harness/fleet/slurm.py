"""Slurm's own commands, from the login node: sbatch submits the job, squeue and scontrol say how it stands, scancel
ends it. Every call is bounded in time, and a command that is missing or fails is said in one paragraph.

Job states are read with `scontrol show job -o` (slurm 22.05 scontrol(1)), which needs no accounting database:
`sacct` needs slurmdbd or a job-completion plugin, which many clusters (and the local test cluster) do not run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CALL_TIMEOUT_S = 60  # one Slurm command; a controller that does not answer within this is an error, not a hang
# States a job stays in while it may still run (slurm squeue(1) JOB STATE CODES); any other state is final.
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "SIGNALING",
          "STAGE_OUT")


class SlurmError(RuntimeError):
    """A Slurm command is missing, failed or did not answer: one paragraph, for the command line to print."""


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL... or UNKNOWN
    reason: str = ""
    nodes: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def available() -> str | None:
    """Why xmfu fleet cannot submit from here, or None."""
    missing = [c for c in ("sbatch", "squeue", "scontrol") if shutil.which(c) is None]
    if missing:
        return (f"xmfu fleet submits to Slurm from a login node, and {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not on PATH here: run it where Slurm's client commands "
                "are installed (to try it on one machine: scripts/slurm_local.sh start 4, docs/slurm-local.md)")
    return None


def _call(words: Sequence[str], what: str) -> str:
    try:
        done = subprocess.run(list(words), capture_output=True, text=True, timeout=CALL_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise SlurmError(f"{what}: {words[0]} is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{what}: `{' '.join(words)}` did not answer within {CALL_TIMEOUT_S} s (is slurmctld "
                         "up?)") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split())[:500]
        raise SlurmError(f"{what}: `{' '.join(words)}` exited {done.returncode}: {said}")
    return done.stdout


def submit(script: Path, test_only: bool = False) -> str:
    """The job id of the submitted script; with `test_only`, what `sbatch --test-only` says (the job is checked
    against the cluster's configuration and not submitted)."""
    if test_only:
        done = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                              timeout=CALL_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise SlurmError(f"sbatch --test-only refused {script}: {' '.join(done.stderr.split())[:500]}")
        return " ".join((done.stderr or done.stdout).split())
    out = _call(["sbatch", "--parsable", str(script)], "submitting the fleet job")
    job = out.strip().split(";")[0]  # --parsable: "jobid[;cluster]"
    if not job.isdigit():
        raise SlurmError(f"sbatch --parsable answered {out.strip()!r}, not a job id")
    return job


_FIELD = re.compile(r"(\w+)=(\S*)")


def state(job_id: str) -> JobState:
    """The job's state as scontrol has it; UNKNOWN once the controller has forgotten the job (MinJobAge)."""
    done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                          timeout=CALL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return JobState(job_id, "UNKNOWN", "the controller no longer holds the job")
        raise SlurmError(f"scontrol show job {job_id} exited {done.returncode}: {' '.join(done.stderr.split())}")
    fields = dict(_FIELD.findall(done.stdout))
    return JobState(job_id, fields.get("JobState", "UNKNOWN"), fields.get("Reason", ""), fields.get("NodeList", ""))


def cancel(job_id: str) -> None:
    _call(["scancel", job_id], f"cancelling job {job_id}")
