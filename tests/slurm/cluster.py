"""The running local Slurm cluster the tests marked `slurm` use, and the skip that fails under CI.

The `slurm_cluster` fixture (tests/slurm/conftest.py) gives the running cluster: the one whose slurm.conf
`XMFU_SLURM_CONF` names (CI's .ci/run starts it with scripts/slurm_local.sh and exports that), else one the test
session starts with the script in a temporary folder and stops at its end. Where Slurm is not installed (or this is
not root) the tests skip, saying why; where CI=true such a skip fails instead, so CI cannot pass without them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def unavailable(reason: str) -> None:
    """Skip with the reason; under CI=true fail with it (a skipped group would let CI pass without it)."""
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason} (CI=true: the Slurm tests must run in CI, not skip)", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class Cluster:
    conf: Path  # its slurm.conf (SLURM_CONF)
    folder: Path  # the script's state folder (XMFU_SLURM_DIR): the slurm.conf's folder

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "XMFU_SLURM_DIR": str(self.folder),
                "PATH": f"{os.environ.get('PATH', '')}:{SBIN}"}

    def run(self, *command: str, timeout: float = 60, check: bool = True,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        """A command (srun, sinfo, ...) against this cluster; every call bounded."""
        done = subprocess.run(command, env=self.env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            pytest.fail(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
        return done

    def script(self, *args: str, timeout: float = 150, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("bash", str(SCRIPT), *args, timeout=timeout, check=check)

    def status(self) -> list[list[str]]:
        """scripts/slurm_local.sh status: [node, hostname, slurmd pid or -] per node."""
        return [line.split() for line in self.script("status").stdout.splitlines()]

    def nodes(self) -> list[str]:
        return [fields[0] for fields in self.status()]

    def state(self, node: str) -> str:
        """The node's state as sinfo prints it (idle, idle*, down*, ...); '' when slurmctld does not answer."""
        done = self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T", timeout=15, check=False)
        return done.stdout.split()[0] if done.returncode == 0 and done.stdout.split() else ""

    def wait_state(self, node: str, prefix: str, seconds: float) -> str:
        """Poll sinfo until the node's state starts with prefix; its last state (which may not) after seconds."""
        deadline = time.monotonic() + seconds
        while True:
            state = self.state(node)
            if state.startswith(prefix) or time.monotonic() > deadline:
                return state
            time.sleep(1)


def slurm_installed() -> bool:
    return shutil.which("slurmctld", path=f"{os.environ.get('PATH', '')}:{SBIN}") is not None
