"""The cases the engine runs for `workload=transformer`: a step spec plus its fp64 correctness check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.engine.case import Check
from workloads.transformer import reference
from workloads.transformer.spec import TrainSpec, parse_specs


@dataclass(frozen=True)
class TrainCase(TrainSpec):
    def check(self, result: dict[str, float]) -> Check:
        return reference.check_step(self, result)


def expand(workload: Mapping[str, Any], dtype: str, seed: int) -> Sequence[TrainCase]:
    """One case per batch size in `workload.batch` (a sweep finds the largest that fits)."""
    return [TrainCase(**vars(spec)) for spec in parse_specs(workload, dtype, seed)]
