"""What `xmfu fleet run` is asked for: nodes, level, link schedule, baseline and rules, container, results folder.

The levels follow `dcgmi diag`'s idea of a time budget per level (NVIDIA DCGM diagnostics: levels 1-4, seconds to
about 15 minutes): `quick` is seconds per node (the doctor, one matmul, one small collective), `medium` about two
minutes, `long` the acceptance suite. Each level's per-node check is a suite overlay under configs/experiment/
(fleet-quick, fleet-medium; long is experiment=acceptance), run by the same suite code as `xmfu run experiment=...`.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xmfu.harness.fleet.schedule import PAIR_MODES

LEVELS = ("quick", "medium", "long")
NODE_EXPERIMENT = {"quick": "fleet-quick", "medium": "fleet-medium", "long": "acceptance"}
AGAIN = "again"  # a node check measured a second time: its step node-<host>-again, its results nodes/<host>-again/
# Minutes a step may run before Slurm ends it (srun --time): the node check, one pair's link test, the all-node
# steps. Generous against the measured step times (docs/fleet.md), so only a hung step reaches them.
STEP_MINUTES = {"quick": {"node": 10, "pair": 5, "all": 10},
                "medium": {"node": 20, "pair": 5, "all": 20},
                "long": {"node": 180, "pair": 10, "all": 60}}
RUNTIMES = ("pyxis", "apptainer")
SPEC_FILE = "fleet.json"
FLEET_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Container:
    """Where the steps run: the host's own environment (image None), a pyxis/enroot image named to srun
    (`--container-image`, NVIDIA pyxis README), or an Apptainer image each step is executed in."""

    image: str | None = None
    runtime: str = "pyxis"
    mounts: tuple[str, ...] = ()  # SRC:DST, the fleet folder always added


@dataclass(frozen=True)
class FleetSpec:
    fleet_id: str
    nodes: int
    level: str
    pairs: str
    results_dir: str
    partition: str | None = None
    baseline: str | None = None  # an earlier fleet folder, or an expectation file
    rules: str | None = None  # a rules file (YAML); None: the built-in rules (diagnose.py)
    container: Container = field(default_factory=Container)
    xmfu: str = "xmfu"  # how a step calls xmfu on the node (outside a container: this Python's `-m xmfu`)
    scale: str = "auto"  # the node checks' suite.scale: auto (smoke sizes without an accelerator), smoke, full
    created: str = ""
    step_limit: int | None = None  # minutes every step may run (srun --time); None: the level's STEP_MINUTES

    @property
    def folder(self) -> Path:
        return Path(self.results_dir) / self.fleet_id

    def minutes(self, step: str) -> int:
        return self.step_limit or STEP_MINUTES[self.level][step]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def write(spec: FleetSpec) -> Path:
    path = spec.folder / SPEC_FILE
    path.write_text(json.dumps(spec.as_dict(), indent=2, sort_keys=True) + "\n")
    return path


def read(folder: Path) -> FleetSpec:
    """The spec of an existing fleet folder; ValueError naming what is wrong with it."""
    path = folder / SPEC_FILE
    try:
        data = json.loads(path.read_text())
        data["container"] = Container(**{**data.get("container", {}),
                                         "mounts": tuple(data.get("container", {}).get("mounts", ()))})
        spec = FleetSpec(**data)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a fleet folder's spec ({exc})") from None
    problems = check(spec)
    if problems:
        raise ValueError(f"{path}: {'; '.join(problems)}")
    return spec


def check(spec: FleetSpec) -> list[str]:
    """Every value that is not allowed, each with what is."""
    out = []
    if not FLEET_ID.match(spec.fleet_id):
        out.append(f"fleet id {spec.fleet_id!r}: a plain folder name (letters, digits, '.', '_', '-')")
    if spec.nodes < 2:
        out.append(f"--nodes {spec.nodes}: at least 2 (a fleet is judged node against node)")
    if spec.level not in LEVELS:
        out.append(f"--level {spec.level}: allowed {', '.join(LEVELS)}")
    if spec.pairs not in PAIR_MODES:
        out.append(f"--pairs {spec.pairs}: allowed {', '.join(PAIR_MODES)}")
    if spec.container.runtime not in RUNTIMES:
        out.append(f"--container-runtime {spec.container.runtime}: allowed {', '.join(RUNTIMES)}")
    if spec.step_limit is not None and spec.step_limit < 1:
        out.append(f"--step-limit {spec.step_limit}: whole minutes, at least 1 (srun --time)")
    if spec.scale not in ("auto", "smoke", "full"):
        out.append(f"scale {spec.scale}: allowed auto, smoke, full")
    return out
