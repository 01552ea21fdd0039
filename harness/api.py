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

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import yaml

from xmfu.harness.config.run_settings import RunSettings, parse_run_config
from xmfu.harness.engine.case import Check, Prepared, Unavailable
from xmfu.harness.engine.registry import Implementation, Registry, WorkloadDef
from xmfu.harness.machine import torch_device
from xmfu.harness.machine.frameworks import jax_rows, torch_rows
from xmfu.harness.results.bundle.reader import read_bundle


def to_numpy(x: Any) -> np.ndarray | None:
    """A float64 host copy of a torch tensor, a JAX array or anything numpy understands; None for None."""
    if x is None:
        return None
    if hasattr(x, "detach"):  # torch
        return torch_rows(x.detach(), None)
    try:
        return jax_rows(x, None)  # np.asarray + float64: JAX arrays and plain arrays alike
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the output is not numbers ({type(x).__name__}: {exc})") from None


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
    # torch says is_cuda on ROCm builds too; an xpu/hpu/neuron tensor is not on the host either
    on_gpu = [x for x in found if getattr(x, "is_cuda", False) or _on_torch_accelerator(x)]
    if platform_kind == "cpu":
        if on_gpu:
            raise Unavailable("it returns GPU tensors, but device='cpu' was asked for: pass device='gpu' (or 'auto') "
                              "so the GPU is synchronized around each timed call")
        return "host", ""
    if _torch_drives(platform_kind):
        return "torch", ""  # the device's torch timer (machine/sync.py): on a GPU, events after a synchronize
    return "host", (f"on a {platform_kind} device xmfu can only wait for JAX arrays a candidate returns, or for "
                    "work on torch's GPU; this one returned neither")


def _on_torch_accelerator(x: Any) -> bool:
    device = getattr(x, "device", None)
    return hasattr(x, "is_cuda") and getattr(device, "type", "cpu") != "cpu"


def _torch_drives(platform_kind: str) -> bool:
    """Whether torch drives the run's accelerator: torch.cuda.is_available() for cuda/rocm, else whether
    torch.accelerator's device is of this platform kind (machine/torch_device.py)."""
    import importlib.util

    if platform_kind == "cpu" or importlib.util.find_spec("torch") is None:
        return False
    import torch

    if platform_kind in ("cuda", "rocm"):
        return bool(torch.cuda.is_available())  # the CUDA/ROCm check as it always was
    device_type = torch_device.accelerator_type(torch)
    return device_type is not None and torch_device.platform_kind(torch, device_type)[0] == platform_kind


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

    def check(self, result: np.ndarray | str | None) -> Check:
        """max|X - Xref| / max|Xref|; a missing, misshapen or non-finite result is incorrect, never a speed."""
        ref, metric = self.reference, "max|X-Xref|/max|Xref|"
        if result is None:
            return Check(False, math.inf, self.tolerance, metric, "the candidate returned None")
        if isinstance(result, str):  # what _as_result says of an output that is not numbers
            return Check(False, math.inf, self.tolerance, metric, result)
        if result.shape != ref.shape:
            return Check(False, math.inf, self.tolerance, metric, f"shape {result.shape} vs reference {ref.shape}")
        bad = int(np.size(result) - np.count_nonzero(np.isfinite(result)))
        if bad:
            return Check(False, math.inf, self.tolerance, metric, f"{bad} of {result.size} values are NaN or infinite")
        scale = float(np.max(np.abs(ref))) or 1.0
        error = float(np.max(np.abs(result - ref))) / scale if result.size else 0.0
        return Check(error <= self.tolerance, error, self.tolerance, metric, f"all {ref.size} values")


def _as_result(output: Any) -> np.ndarray | str | None:
    """The candidate's output as float64 numbers, or the reason it is not numbers (an incorrect row)."""
    try:
        return to_numpy(output)
    except ValueError as exc:
        return str(exc)


def _implementation(name: str, fn: Callable[[], Any]) -> Implementation:
    def prepare(case: CallableCase, ctx: Any) -> Prepared:
        framework, untimed = timer_framework(fn(), ctx.platform.kind)
        # output: the last timed call's return value, re-checked after the timed loop (engine/recheck.py)
        return Prepared(fn, lambda select: _as_result(fn()), framework, timing_valid=not untimed,
                        timing_note=untimed, output=lambda out, select: _as_result(out))

    return Implementation(name, lambda case, ctx: (True, ""), prepare)


@dataclass
class Result:
    bundle: str
    exit_code: int
    rows: list[dict[str, Any]]


def _check_candidates(candidates: Any, name: Any) -> None:
    """Refused up front, naming the argument: before, a non-callable candidate failed only when its turn came and a
    name that is not a string went into the bundle (a case id, a backend) as whatever it was."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: {name!r} is not usable. Allowed: a non-empty string")
    if not isinstance(candidates, Mapping) or not candidates:
        raise ValueError(f"candidates: {type(candidates).__name__} is not usable. Allowed: a non-empty mapping of "
                         "name (a string) to a zero-argument callable")
    for key, fn in candidates.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"candidates: the name {key!r} is not usable. Allowed: a non-empty string")
        if not callable(fn):
            raise ValueError(f"candidates[{key!r}]: {type(fn).__name__} is not callable. Allowed: a zero-argument "
                             "callable that runs the work")


def _positive(name: str, value: Any, allow_none: bool = False) -> float | None:
    """A positive, finite number for `name`, or a ValueError naming it and what is allowed."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: {value!r} is not usable. Allowed: a positive finite number"
                         + (", or None (not known)" if allow_none else ""))
    return float(value)


def _reference_values(reference: Callable[[], Any] | Any) -> np.ndarray:
    """The reference's values as float64, or the documented refusal: a ValueError naming the argument, also where
    calling it raised (before, that error came through as it was, e.g. a RuntimeError) or its output is not
    numbers."""
    try:
        ref = to_numpy(reference() if callable(reference) else reference)
    except Exception as exc:  # the caller's code: whatever it raises is a bad reference, said as one
        what = f"calling it raised {type(exc).__name__}: {exc}" if callable(reference) else str(exc)
        raise ValueError(f"reference: {what}. Allowed: a callable that returns finite numbers, or those "
                         "numbers") from exc
    if ref is None or not np.all(np.isfinite(ref)):
        raise ValueError("reference: it returned None or non-finite values. Allowed: finite numbers to compare with")
    return ref


RUN_DEFAULTS = RunSettings()  # `xmfu run`'s declared defaults: benchmark()'s results_dir, device and repeats too
DEFAULT_TIMING = {"warmup_s": 0.2, "max_time_s": 5.0, "target_rel_ci": 0.02}


def benchmark(candidates: Mapping[str, Callable[[], Any]], reference: Callable[[], Any] | Any, *,
              flops: float | None = None, bytes_moved: float | None = None, name: str = "kernel", dtype: str = "fp32",
              tolerance: float = 1e-2, baseline: str | None = None, timing: Mapping[str, Any] | None = None,
              results_dir: str = RUN_DEFAULTS.results_dir, device: str = RUN_DEFAULTS.device,
              repeats: int = RUN_DEFAULTS.repeats) -> Result:
    """Check, time and compare `candidates`; returns the bundle path and its rows.

    `repeats` runs the whole measurement that many times (interleaved): the CI then includes the spread
    between repeats, and `xmfu compare` has run-to-run variance to base its verdict on.

    With `baseline`, every candidate is sampled for at least stats.MIN_ROUNDS interleaved rounds (within
    `timing.max_samples`); a speedup's verdict is `inconclusive`, with `verdict_reason`, where the case was
    contended or fewer rounds were paired.

    `device` says where the candidates' work runs: "auto" (the accelerator torch or JAX sees, else the host),
    "cpu", or "gpu" (xmfu.harness.machine.platform.NoAcceleratorError where there is none).
    """
    from xmfu.harness.run import execute

    _check_candidates(candidates, name)
    flops_value = _positive("flops", flops, allow_none=True)
    bytes_value = _positive("bytes_moved", bytes_moved, allow_none=True)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise ValueError(f"tolerance: {tolerance!r} is not usable. Allowed: a number >= 0 (relative error)")
    ref = _reference_values(reference)
    case = CallableCase(name, dtype, flops_value or 0.0, bytes_value or 0.0, float(tolerance), ref)
    names = list(candidates)
    registry = Registry()
    registry.add(WorkloadDef("custom", lambda cfg, dt, seed: [case],
                             {n: _implementation(n, fn) for n, fn in candidates.items()}))
    data = {"workload": {"name": "custom"}, "backends": names, "dtype": dtype, "baseline": baseline,
            "timing": dict(timing or DEFAULT_TIMING), "mamf": {},
            "results_dir": results_dir, "device": device, "repeats": repeats}
    cfg = parse_run_config(data, registry.backends_by_workload())
    outcome = execute(cfg, registry, _config_yaml(case, data, cfg), ["xmfu.benchmark"], [])
    # the rows as written, plain dicts: what Result.rows promises its users (result.rows[1]["speedup"]["verdict"])
    return Result(str(outcome.bundle), outcome.exit_code, read_bundle(outcome.bundle).raw_rows)


BENCHMARK = "benchmark"  # config.yaml's key for the case of a bundle xmfu.benchmark wrote


def _config_yaml(case: CallableCase, data: dict[str, Any], cfg: Any) -> str:
    """config.yaml of a benchmark's bundle: the settings as parsed (the timing resolved, so that a later xmfu's
    defaults cannot change what they say) and the case but its reference's values, from which `xmfu validate` plans
    the run again (`replanned`) and re-derives every row's params, FLOPs, bytes and protocol and the manifest's
    comparability_key, as for a bundle of `xmfu run`."""
    spec = {"name": case.name, "flops": case.flop_count, "bytes": case.byte_count, "tolerance": case.tolerance}
    settings = {**data, "timing": dataclasses.asdict(cfg.timing)}
    return f"# xmfu.benchmark: {case.name}\n" + yaml.safe_dump({BENCHMARK: spec, **settings}, sort_keys=False)


def replanned(data: Any) -> tuple[Registry, dict[str, Any]] | None:
    """For config.yaml data that xmfu.benchmark wrote: the registry its run planned with (its one case, the
    candidates by name, no callable) and its settings as parse_run_config takes them; None for any other config.
    KeyError, TypeError or ValueError where the benchmark's part is malformed."""
    spec = data.get(BENCHMARK) if isinstance(data, Mapping) else None
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or not isinstance(data.get("backends"), list):
        raise ValueError(f"{BENCHMARK}: not the case xmfu.benchmark writes")
    case = CallableCase(str(spec["name"]), str(data.get("dtype")), float(spec["flops"]), float(spec["bytes"]),
                        float(spec["tolerance"]), None)
    registry = Registry()
    registry.add(WorkloadDef("custom", lambda cfg, dt, seed: [case],
                             {str(n): _implementation(str(n), lambda: None) for n in data["backends"]}))
    return registry, {k: v for k, v in data.items() if k != BENCHMARK}
