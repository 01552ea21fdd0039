"""Which process of a multi-process run this is, read from the launcher's environment.

xmfu launches nothing itself: torchrun (and Slurm, through Hydra's submitit launcher) start the processes
and set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; backends that need a process group
build it from these; JAX also joins processes described by JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
JAX_PROCESS_ID. Rank 0 writes the bundle; the other ranks only measure.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ProcessInfo:
    rank: int
    world_size: int
    local_rank: int
    launcher: str  # torchrun | slurm | submitit_local | jax | env | single

    @property
    def writes_bundle(self) -> bool:
        return self.rank == 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_info(environ: dict[str, str] | None = None) -> ProcessInfo:
    """torchrun's RANK/WORLD_SIZE/LOCAL_RANK first, then Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID (or the
    same from Hydra's submitit_local launcher, which runs a Slurm job's tasks on this machine), then JAX's own
    JAX_PROCESS_ID/JAX_NUM_PROCESSES (with JAX_COORDINATOR_ADDRESS: processes started by any other means, which
    jax.distributed.initialize joins)."""
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" in env:
        launcher = "torchrun"
    elif "SLURM_JOB_ID" in env:
        launcher = "slurm"
    elif "SUBMITIT_LOCAL_JOB_ID" in env:  # Hydra's submitit_local launcher: the Slurm path's tasks on this machine
        launcher = "submitit_local"
    elif "JAX_COORDINATOR_ADDRESS" in env and "JAX_PROCESS_ID" in env:
        launcher = "jax"
    else:
        launcher = "single" if "RANK" not in env else "env"
    # submitit's local executor names its tasks SUBMITIT_LOCAL_GLOBALID / _NTASKS / _LOCALID
    # (submitit/local/local.py, LocalJobEnvironment._env).
    rank = int(env.get("RANK", env.get("SLURM_PROCID", env.get("SUBMITIT_LOCAL_GLOBALID",
                                                                   env.get("JAX_PROCESS_ID", "0")))))
    world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", env.get("SUBMITIT_LOCAL_NTASKS",
                                                                          env.get("JAX_NUM_PROCESSES", "1")))))
    local = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", env.get("SUBMITIT_LOCAL_LOCALID", "0"))))
    return ProcessInfo(rank, world, local, launcher)


SCONTROL_TIMEOUT_S = 30
# The port of torch's store (and JAX's coordinator, one above it), which every rank computes alike from the job:
# drawn below Linux's default ephemeral range (net.ipv4.ip_local_port_range, 32768-60999), from which srun's own
# listening sockets, gloo's and every outgoing connection take theirs. Drawn from 20000-60000 (submitit's range,
# and this one's before), rank 0's store once found its port taken on the local Slurm cluster (EADDRINUSE).
RENDEZVOUS_PORTS = (20000, 32766)


def rendezvous_port(seed: str) -> int:
    """The store's port for a job (or a job's step): the same on every rank that is given the same seed."""
    import random

    return random.Random(seed).randint(*RENDEZVOUS_PORTS)


def slurm_rendezvous(environ: dict[str, str] | None = None) -> dict[str, str]:
    """torch.distributed's env:// variables for a task that `srun` started (no torchrun, no submitit): rank and
    world size from SLURM_PROCID and SLURM_NTASKS, the local rank from SLURM_LOCALID, the master the first host of
    the step (SLURM_STEP_NODELIST, else the job's), as `scontrol show hostnames` expands Slurm's compressed host
    list, and a port drawn from the job and step ids: every task of the step computes the same without talking,
    and two steps running at once in one job (a fleet's disjoint pairs) get different ports. {} outside Slurm."""
    import subprocess

    env = os.environ if environ is None else environ
    if "SLURM_JOB_ID" not in env or "SLURM_PROCID" not in env:
        return {}
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    try:
        done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                              timeout=SCONTROL_TIMEOUT_S, check=True)
        master = done.stdout.split()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        master = nodelist.split(",")[0].split("[")[0]  # a plain first name; a bracketed range would need scontrol
    seed = f"{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '')}"
    return {"MASTER_ADDR": master, "MASTER_PORT": str(rendezvous_port(seed)),
            "RANK": env["SLURM_PROCID"], "WORLD_SIZE": env.get("SLURM_NTASKS", "1"),
            "LOCAL_RANK": env.get("SLURM_LOCALID", "0")}
