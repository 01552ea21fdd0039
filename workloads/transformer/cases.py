"""The cases the engine runs for `workload=transformer`: a step spec plus its correctness check (the fp64
model for the single-device step; the single-device step itself for a distributed one)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xmfu.harness.engine.case import Check
from xmfu.workloads.transformer import fp8, parallel, parity, reference
from xmfu.workloads.transformer.spec import TrainSpec, parse_specs


@dataclass(frozen=True)
class TrainCase(TrainSpec):
    def check(self, result: dict[str, Any]) -> Check:
        if self.distributed:
            return parity.check_parity(self.dtype, result)
        if self.fp8 != "none":
            return fp8.check_losses(self.fp8, result, self.check_rows()["tokens"])
        return reference.check_step(self, result)

    def flops_by_format(self) -> dict[str, float] | None:
        """An fp8 step's `flops` split by the format its GEMMs run in (fp8.py); None where all run in the row's
        dtype. The engine states MFU against the FLOP-weighted peak of these formats and against the bf16 peak."""
        if self.fp8 == "none":
            return None
        fp8_params = fp8.fp8_parameters(self.model.weight_shapes())
        return fp8.flops_by_format(self.flops(), self.tokens / self.devices, fp8_params)

    def restate(self, row: dict[str, Any]) -> dict[str, Any]:
        """A row's figures that the formulas fix: an fp8 step's FLOPs per format (fp8.py); a distributed step's
        bytes each rank sends per step (parallel.nominal, the formula the backends record) and global FLOPs
        (figures.py `derive`). `xmfu validate` checks a row's against these."""
        by_format = self.flops_by_format()
        if by_format is not None:  # `xmfu validate` re-derives the split from the formula
            return {"flops_by_format": by_format}
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
