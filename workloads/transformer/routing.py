"""A mixture-of-experts step's routing imbalance, step by step: what the row's `routing` record holds.

Imbalance of one MoE block in one step = the tokens of its busiest expert / the mean tokens per expert
(T·k / E): 1 when every expert gets the same share, E/k when every token picks the same k experts. The busiest
expert's GEMM is the block's longest, so the realized TFLOP/s of a step falls with it (MegaBlocks, Gale et al.
2022, section 3; DeepSeek-V3 report section 2.1.2 on balancing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xmfu.workloads.transformer.spec import ModelSpec


def imbalance(counts: np.ndarray) -> np.ndarray:
    """counts (MoE blocks, E) tokens per expert -> (MoE blocks,) max / mean."""
    counts = np.asarray(counts, dtype=np.float64)
    return counts.max(axis=-1) / counts.mean(axis=-1)


@dataclass
class RoutingLog:
    """Each step's per-block imbalance, kept as the framework's arrays until read (no device sync in the step)."""

    model: ModelSpec
    expert_gemm: str
    to_host: Callable[[Any], np.ndarray]
    steps: list[Any] = field(default_factory=list)

    def add(self, per_block: Any) -> None:
        """per_block: the step's (MoE blocks,) max/mean, still on the device."""
        self.steps.append(per_block)

    def figures(self) -> dict[str, Any]:
        """The row's `routing` record; no record when no step ran."""
        if not self.steps:
            return {}
        blocks = np.stack([self.to_host(s) for s in self.steps]).astype(np.float64)  # (steps, MoE blocks)
        per_step = blocks.mean(axis=1)
        return {"routing": {"per_step": [float(v) for v in per_step], "mean": float(per_step.mean()),
                            "worst_block": float(blocks.max()), "experts": self.model.n_experts,
                            "top_k": self.model.top_k, "expert_gemm": self.expert_gemm}}
