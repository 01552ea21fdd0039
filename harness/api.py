"""Benchmark arbitrary callables from a script or notebook, through the same engine as `xmfu run`.

    import torch, xmfu
    a, b = torch.rand(512, 512), torch.rand(512, 512)
    result = xmfu.benchmark({"torch": lambda: a @ b, "einsum": lambda: torch.einsum("ik,kj->ij", a, b)},
                            reference=lambda: (a.double() @ b.double()), flops=2 * 512**3, baseline="torch")
    result.rows[1]["speedup"]["verdict"]

Each candidate is a zero-argument callable (set-up happens before you pass it, and is not timed). Its output
is checked against the reference before anything is timed; the candidates are timed in interleaved rounds,
and a normal bundle is written.

Where the work runs is the caller's to say (`device=auto|cpu|gpu`, as for `xmfu run`), not something guessed
from what a callable returns: on a GPU every candidate is timed with device events after a full
torch.cuda.synchronize(), whatever it returns; JAX arrays anywhere in the output (tuples, lists, dicts) are
waited on with jax.block_until_ready. A JAX callable must return its arrays: JAX has nothing else to wait on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from harness.config import parse_run_config
from harness.engine.case import Check, Prepared, Unavailable
from harness.engine.registry import Implementation, Registry, WorkloadDef
from harness.machine.frameworks import jax_rows, torch_rows
from harness.results.reader import read_bundle


def to_numpy(x: Any) -> np.ndarray:
    """A float64 host copy of a torch tensor, a JAX array or anything numpy understands."""
    if hasattr(x, "detach"):  # torch
        return torch_rows(x.detach(), None)
    return jax_rows(x, None)  # np.asarray + float64: JAX arrays and plain arrays alike


def leaves(x: Any) -> list[Any]:
    """The values inside the tuples, lists and dicts a callable may return (the containers themselves not)."""
    if isinstance(x, (tuple, list)):
        return [leaf for item in x for leaf in leaves(item)]
    if isinstance(x, dict):
        return [leaf for item in x.values() for leaf in leaves(item)]
    return [x]


def _is_jax_array(x: Any) -> bool:
    return hasattr(x, "block_until_ready") and not hasattr(x, "is_cuda")  # torch tensors have no such method


def timer_framework(output: Any, platform_kind: str) -> tuple[str, str]:
    """The timer for a candidate whose output is `output` on a `platform_kind` run: ("jax" | "torch" | "host",
    why it cannot be timed, or ""). Raises Unavailable for GPU tensors on a run the caller said is a CPU one."""
    found = leaves(output)
    if any(_is_jax_array(x) for x in found):
        return "jax", ""  # JaxTimer blocks on the whole output (jax.block_until_ready takes a pytree)
    on_gpu = [x for x in found if getattr(x, "is_cuda", False)]  # torch says is_cuda on ROCm builds too
    if platform_kind == "cpu":
        if on_gpu:
            raise Unavailable("it returns GPU tensors, but device='cpu' was asked for: pass device='gpu' (or 'auto') "
                              "so the GPU is synchronized around each timed call")
        return "host", ""
    if platform_kind in ("cuda", "rocm") and _torch_sees_gpu():
        return "torch", ""  # device events after torch.cuda.synchronize(), whatever the callable returns
    return "host", (f"on a {platform_kind} device xmfu can only wait for JAX arrays a candidate returns, or for "
                    "work on torch's GPU; this one returned neither")


def _torch_sees_gpu() -> bool:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


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
        framework, untimed = timer_framework(fn(), ctx.platform.kind)
        return Prepared(fn, lambda select: to_numpy(fn()), framework, timing_valid=not untimed,
                        timing_note=untimed)

    return Implementation(name, lambda case, ctx: (True, ""), prepare)


@dataclass
class Result:
    bundle: str
    exit_code: int
    rows: list[dict[str, Any]]


def benchmark(candidates: Mapping[str, Callable[[], Any]], reference: Callable[[], Any] | Any, *,
              flops: float = 0.0, bytes_moved: float = 0.0, name: str = "kernel", dtype: str = "fp32",
              tolerance: float = 1e-2, baseline: str | None = None, timing: Mapping[str, Any] | None = None,
              results_dir: str = "results", device: str = "auto", repeats: int = 1) -> Result:
    """Check, time and compare `candidates`; returns the bundle path and its rows.

    `repeats` runs the whole measurement that many times (interleaved): the CI then includes the spread
    between repeats, and `xmfu compare` has run-to-run variance to base its verdict on.

    `device` says where the candidates' work runs: "auto" (the accelerator torch or JAX sees, else the host),
    "cpu", or "gpu" (harness.machine.platform.NoAcceleratorError where there is none).
    """
    from harness.run import execute

    ref = to_numpy(reference() if callable(reference) else reference)
    case = CallableCase(name, dtype, float(flops), float(bytes_moved), tolerance, ref)
    names = list(candidates)
    registry = Registry()
    registry.add(WorkloadDef("custom", lambda cfg, dt, seed: [case],
                             {n: _implementation(n, fn) for n, fn in candidates.items()}))
    data = {"workload": {"name": "custom"}, "backends": names, "dtype": dtype, "baseline": baseline,
            "timing": dict(timing or {"warmup_s": 0.2, "max_time_s": 5.0, "target_rel_ci": 0.02}), "mamf": {},
            "results_dir": results_dir, "device": device, "repeats": repeats}
    cfg = parse_run_config(data, registry.backends_by_workload())
    outcome = execute(cfg, registry, f"# xmfu.benchmark: {name}\n", ["xmfu.benchmark"], [])
    return Result(str(outcome.bundle), outcome.exit_code, read_bundle(outcome.bundle).cases)
