"""The cases the engine runs for `workload=inference`: a phase spec plus its fp64 correctness check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Check
from xmfu.workloads.inference import reference
from xmfu.workloads.inference.spec import InferenceSpec, parse_specs


@dataclass(frozen=True)
class InferenceCase(InferenceSpec):
    def check(self, result: dict[str, np.ndarray]) -> Check:
        return reference.check_generation(self, result)


def expand(workload: Mapping[str, Any], dtype: str, seed: int) -> Sequence[InferenceCase]:
    """Prefill cases per (batch, prompt_len), decode cases per (batch, prompt_len, gen_len)."""
    return [InferenceCase(**vars(spec)) for spec in parse_specs(workload, dtype, seed)]
