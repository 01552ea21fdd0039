"""Which process of a multi-process run this is, read from the launcher's environment.

xmfu launches nothing itself: torchrun (and Slurm, through Hydra's submitit launcher) start the processes
and set RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; backends that need a process group
build it from these. Rank 0 writes the bundle; the other ranks only measure.
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
    launcher: str  # torchrun | slurm | single

    @property
    def writes_bundle(self) -> bool:
        return self.rank == 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_info(environ: dict[str, str] | None = None) -> ProcessInfo:
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" in env:
        launcher = "torchrun"
    elif "SLURM_JOB_ID" in env:
        launcher = "slurm"
    else:
        launcher = "single" if "RANK" not in env else "env"
    rank = int(env.get("RANK", env.get("SLURM_PROCID", "0")))
    world = int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS", "1")))
    local = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", "0")))
    return ProcessInfo(rank, world, local, launcher)
