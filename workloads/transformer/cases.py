"""The cases the engine runs for `workload=transformer`: a step spec plus its correctness check (the fp64
model for the single-device step; the single-device step itself for a distributed one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xmfu.harness.engine.case import Check
from xmfu.workloads.transformer import parallel, parity, reference
from xmfu.workloads.transformer.spec import TrainSpec, parse_specs


@dataclass(frozen=True)
class TrainCase(TrainSpec):
    def check(self, result: dict[str, Any]) -> Check:
        if self.distributed:
            return parity.check_parity(self.dtype, result)
        return reference.check_step(self, result)

    def restate(self, row: dict[str, Any]) -> dict[str, Any]:
        """A distributed step row's figures that the formulas fix (figures.py `derive`): the bytes each rank sends
        per step (parallel.nominal, the formula the backends record) and the global FLOPs; `xmfu validate` checks
        a row's against these."""
        if not self.distributed or not self.world_size:
            return {}
        if self.parallel == "ep":  # its bytes follow the step's routing (torch_ep_step._comm): no formula to restate
            return {"flops_global": self.flops() * self.world_size}
        framework = "jax" if str(row.get("backend", "")).startswith("jax") else "torch"
        return {"comm_bytes_per_rank": parallel.nominal(self, framework)["bytes_per_rank"],
                "flops_global": self.flops() * self.world_size}


def expand(workload: Mapping[str, Any], dtype: str, seed: int) -> Sequence[TrainCase]:
    """One case per batch size in `workload.batch` and strategy in `workload.parallel`."""
    return [TrainCase(**vars(spec)) for spec in parse_specs(workload, dtype, seed)]
