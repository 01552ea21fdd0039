"""Benchmark arbitrary callables from a script or notebook, through the same engine as `xmfu run`.

    import torch, xmfu
    a, b = torch.rand(512, 512), torch.rand(512, 512)
    result = xmfu.benchmark({"torch": lambda: a @ b, "einsum": lambda: torch.einsum("ik,kj->ij", a, b)},
                            reference=lambda: (a.double() @ b.double()), flops=2 * 512**3, baseline="torch")
    result.rows[1]["speedup"]["verdict"]

Each candidate is a zero-argument callable (set-up happens before you pass it, and is not timed). Its output
is checked against the reference before anything is timed; the candidates are timed in interleaved rounds,
and a normal bundle is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from harness.config import parse_run_config
from harness.engine.case import Check, Prepared
from harness.engine.registry import Implementation, Registry, WorkloadDef
from harness.machine.frameworks import jax_rows, torch_rows
from harness.results.reader import read_bundle


def to_numpy(x: Any) -> np.ndarray:
    """A float64 host copy of a torch tensor, a JAX array or anything numpy understands."""
    if hasattr(x, "detach"):  # torch
        return torch_rows(x.detach(), None)
    return jax_rows(x, None)  # np.asarray + float64: JAX arrays and plain arrays alike


def framework_of(x: Any) -> str:
    """Which timer a callable's output needs: device events (torch on a GPU), block_until_ready (JAX)."""
    if hasattr(x, "block_until_ready"):
        return "jax"
    if hasattr(x, "is_cuda") and x.is_cuda:
        return "torch"
    return "host"


@dataclass(frozen=True)
class CallableCase:
    name: str
    dtype: str
    flop_count: float
    byte_count: float
    tolerance: float
    reference: Any  # float64 numpy array

    workload: ClassVar[str] = "custom"
    flop_convention: ClassVar[str] = "caller-supplied"

    @property
    def case_id(self) -> str:
        return f"custom-{self.name}"

    def params(self) -> dict[str, Any]:
        return {"name": self.name, "flops": self.flop_count, "bytes": self.byte_count, "tolerance": self.tolerance}

    def flops(self) -> float:
        return self.flop_count

    def bytes_moved(self) -> float:
        return self.byte_count

    def check_rows(self) -> None:
        return None

    def check(self, result: np.ndarray) -> Check:
        ref = self.reference
        if result.shape != ref.shape:
            return Check(False, float("inf"), self.tolerance, "shape", f"{result.shape} vs reference {ref.shape}")
        scale = float(np.max(np.abs(ref))) or 1.0
        error = float(np.max(np.abs(result - ref))) / scale
        return Check(error <= self.tolerance, error, self.tolerance, "max|X-Xref|/max|Xref|", f"all {ref.size} values")


def _implementation(name: str, fn: Callable[[], Any]) -> Implementation:
    def prepare(case: CallableCase, ctx: Any) -> Prepared:
        return Prepared(fn, lambda select: to_numpy(fn()), framework_of(fn()))

    return Implementation(name, lambda case, ctx: (True, ""), prepare)


@dataclass
class Result:
    bundle: str
    exit_code: int
    rows: list[dict[str, Any]]


def benchmark(candidates: Mapping[str, Callable[[], Any]], reference: Callable[[], Any] | Any, *,
              flops: float = 0.0, bytes_moved: float = 0.0, name: str = "kernel", dtype: str = "fp32",
              tolerance: float = 1e-2, baseline: str | None = None, timing: Mapping[str, Any] | None = None,
              results_dir: str = "results", device: str = "auto") -> Result:
    """Check, time and compare `candidates`; returns the bundle path and its rows."""
    from harness.run import execute

    ref = to_numpy(reference() if callable(reference) else reference)
    case = CallableCase(name, dtype, float(flops), float(bytes_moved), tolerance, ref)
    names = list(candidates)
    registry = Registry()
    registry.add(WorkloadDef("custom", lambda cfg, dt, seed: [case],
                             {n: _implementation(n, fn) for n, fn in candidates.items()}))
    data = {"workload": {"name": "custom"}, "backends": names, "dtype": dtype, "baseline": baseline,
            "timing": dict(timing or {"warmup_s": 0.2, "max_time_s": 5.0, "target_rel_ci": 0.02}), "mamf": {},
            "results_dir": results_dir, "device": device}
    cfg = parse_run_config(data, registry.backends_by_workload())
    outcome = execute(cfg, registry, f"# xmfu.benchmark: {name}\n", ["xmfu.benchmark"], [])
    return Result(str(outcome.bundle), outcome.exit_code, read_bundle(outcome.bundle).cases)
