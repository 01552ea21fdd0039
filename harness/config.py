"""Run configuration: the typed schema a composed Hydra config must satisfy.

Hydra composes plain YAML (configs/); this module turns the composed mapping into frozen dataclasses and
rejects anything out of range with a `ConfigError` that names the field and what is allowed. The CLI turns
that error into one paragraph and exit status 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from harness.dtypes import DTYPES


class ConfigError(ValueError):
    """A configuration value is invalid. `field` is the dotted config path, `allowed` what would be valid."""

    def __init__(self, field: str, problem: str, allowed: str = "") -> None:
        self.field = field
        self.problem = problem
        self.allowed = allowed
        text = f"{field}: {problem}"
        if allowed:
            text += f". Allowed: {allowed}"
        super().__init__(text)


DEVICES = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class TimingConfig:
    """How one (case, backend) is timed. Durations are seconds."""

    warmup_s: float = 0.5
    warmup_min_iters: int = 3
    min_sample_s: float = 0.001  # each sample runs enough back-to-back calls to last this long
    max_inner: int = 1000
    min_samples: int = 10
    max_samples: int = 500
    round_samples: int = 5  # samples per backend per interleaved round
    target_rel_ci: float = 0.01  # stop once the 95% CI half-width of the median is this fraction of it
    max_time_s: float = 10.0  # per case, all backends together
    cold_cache: bool = False  # rotate input copies larger than the last-level cache
    bootstrap_resamples: int = 1000
    sustain_s: float = 0.0  # > 0: sample for exactly this long (no CI stop) and report the steady state
    window_s: float = 10.0  # steady-state analysis window
    steady_tolerance: float = 0.02  # windows within this of the final one count as steady

    def protocol(self) -> dict[str, Any]:
        """The settings that change what a number means (not only how precise it is)."""
        return {"protocol": "xmfu.timing/1", "statistic": "median", "cold_cache": self.cold_cache,
                "sustained": self.sustain_s > 0}


@dataclass(frozen=True)
class TelemetryConfig:
    """Power/clock/temperature sampling around every timed window."""

    enabled: bool = True
    rate_hz: float = 20.0


@dataclass(frozen=True)
class MamfConfig:
    """Maximum achievable matmul FLOPS sweep, run before the main workload when enabled."""

    enabled: bool = False
    backend: str = "torch"
    m: tuple[int, ...] = ()
    n: tuple[int, ...] = ()
    k: tuple[int, ...] = ()


@dataclass(frozen=True)
class RunConfig:
    workload: Mapping[str, Any]
    backends: tuple[str, ...]
    dtype: str
    timing: TimingConfig
    mamf: MamfConfig
    device: str = "auto"
    results_dir: str = "results"
    run_id: str | None = None
    seed: int = 0
    peak_tflops: float | None = None
    achievable_tflops: float | None = None
    cpu_clock_ghz: float | None = None
    baseline: str | None = None  # backend every other one is compared with (speedup, CI, verdict)
    telemetry: TelemetryConfig = TelemetryConfig()
    equivalence_margin: float = 0.02  # speedups within 1 +- this count as equivalent

    @property
    def workload_name(self) -> str:
        return str(self.workload["name"])


def _number(field: str, value: Any, *, integer: bool, minimum: float, inclusive: bool = False) -> Any:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(field, f"{value!r} is not {kind}", f"{kind} {'>=' if inclusive else '>'} {minimum:g}")
    if integer and not float(value).is_integer():
        raise ConfigError(field, f"{value!r} is not an integer", f"an integer > {minimum:g}")
    if not math.isfinite(value) or (value < minimum if inclusive else value <= minimum):
        raise ConfigError(field, f"{value!r} is out of range", f"{kind} {'>=' if inclusive else '>'} {minimum:g}")
    return int(value) if integer else float(value)


def positive_int(field: str, value: Any) -> int:
    return _number(field, value, integer=True, minimum=0)


def positive_float(field: str, value: Any) -> float:
    return _number(field, value, integer=False, minimum=0)


def optional_positive_float(field: str, value: Any) -> float | None:
    return None if value is None else positive_float(field, value)


def boolean(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(field, f"{value!r} is not a boolean", "true or false")
    return value


def int_list(field: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(field, f"{value!r} is not a list", "a list of positive integers, e.g. [1024,2048]")
    return tuple(positive_int(f"{field}[{i}]", v) for i, v in enumerate(value))


def choice(field: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ConfigError(field, f"unknown value {value!r}", ", ".join(allowed))
    return str(value)


def check_keys(field: str, data: Mapping[str, Any], allowed: Sequence[str]) -> None:
    """Reject a setting that is not in `allowed`, naming it as `field.key`."""
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{field}.{key}" if field else key, "unknown setting", ", ".join(allowed))


NON_NEGATIVE = ("warmup_s", "sustain_s")  # zero means "no timed warm-up" (warmup_min_iters still applies)


def parse_timing(data: Mapping[str, Any]) -> TimingConfig:
    names = [f.name for f in fields(TimingConfig)]
    check_keys("timing", data, names)
    values: dict[str, Any] = {}
    for f in fields(TimingConfig):
        if f.name not in data:
            continue
        raw, path = data[f.name], f"timing.{f.name}"
        if f.type == "bool":
            values[f.name] = boolean(path, raw)
        elif f.type == "int":
            values[f.name] = positive_int(path, raw)
        elif f.name in NON_NEGATIVE:
            values[f.name] = _number(path, raw, integer=False, minimum=0, inclusive=True)
        else:
            values[f.name] = positive_float(path, raw)
    timing = TimingConfig(**values)
    if timing.max_samples < timing.min_samples:
        raise ConfigError("timing.max_samples", "is below timing.min_samples", f">= {timing.min_samples}")
    if timing.target_rel_ci >= 1:
        raise ConfigError("timing.target_rel_ci", f"{timing.target_rel_ci} is not a fraction", "0 < x < 1")
    return timing


def parse_mamf(data: Mapping[str, Any], backends: Sequence[str]) -> MamfConfig:
    """`backends` are the matmul workload's: the sweep is always a matmul."""
    check_keys("mamf", data, [f.name for f in fields(MamfConfig)])
    enabled = boolean("mamf.enabled", data.get("enabled", False))
    backend = str(data.get("backend", "torch"))
    if enabled:
        choice("mamf.backend", backend, backends)
    dims = {d: int_list(f"mamf.{d}", data.get(d, [])) for d in ("m", "n", "k")}
    if enabled and not all(dims.values()):
        raise ConfigError("mamf", "enabled but m, n or k is empty", "non-empty lists of sizes")
    return MamfConfig(enabled=enabled, backend=backend, **dims)


def parse_telemetry(data: Mapping[str, Any]) -> TelemetryConfig:
    check_keys("telemetry", data, [f.name for f in fields(TelemetryConfig)])
    return TelemetryConfig(enabled=boolean("telemetry.enabled", data.get("enabled", True)),
                           rate_hz=positive_float("telemetry.rate_hz", data.get("rate_hz", 20.0)))


TOP_LEVEL = (
    "workload", "backends", "dtype", "timing", "mamf", "device", "results_dir", "run_id", "seed",
    "peak_tflops", "achievable_tflops", "cpu_clock_ghz", "baseline", "equivalence_margin",
    "model",  # the model preset group; the transformer workload reads it through ${model}
    "telemetry",
)


def parse_run_config(data: Mapping[str, Any], backends_by_workload: Mapping[str, Sequence[str]]) -> RunConfig:
    """Validate a composed config (plain mapping) against the schema and the registered backends."""
    check_keys("", data, TOP_LEVEL)
    workload = data.get("workload")
    if not isinstance(workload, Mapping) or "name" not in workload:
        raise ConfigError("workload", "missing or has no name", ", ".join(sorted(backends_by_workload)))
    name = choice("workload", workload["name"], sorted(backends_by_workload))
    known = list(backends_by_workload[name])
    backends = data.get("backends")
    if backends is None:  # null: every backend the workload has (the unavailable ones report skipped)
        backends = known
    if isinstance(backends, str):
        backends = [backends]
    if not isinstance(backends, Sequence) or not backends:
        raise ConfigError("backends", f"{backends!r} is not a non-empty list", f"a list drawn from {known}")
    chosen = tuple(choice(f"backends[{i}]", b, known) for i, b in enumerate(backends))
    if len(set(chosen)) != len(chosen):
        raise ConfigError("backends", f"{list(chosen)} names a backend twice", f"distinct names from {known}")
    baseline = data.get("baseline")
    if baseline is not None:
        choice("baseline", baseline, list(chosen))
    run_id = data.get("run_id")
    if run_id is not None and (not isinstance(run_id, str) or not run_id or "/" in run_id):
        raise ConfigError("run_id", f"{run_id!r} is not a usable folder name", "null or a name without '/'")
    return RunConfig(
        workload=dict(workload),
        backends=chosen,
        dtype=choice("dtype", data.get("dtype"), list(DTYPES)),
        timing=parse_timing(data.get("timing") or {}),
        mamf=parse_mamf(data.get("mamf") or {}, backends_by_workload.get("matmul", [])),
        device=choice("device", data.get("device", "auto"), DEVICES),
        results_dir=str(data.get("results_dir", "results")),
        run_id=run_id,
        seed=_number("seed", data.get("seed", 0), integer=True, minimum=0, inclusive=True),
        peak_tflops=optional_positive_float("peak_tflops", data.get("peak_tflops")),
        achievable_tflops=optional_positive_float("achievable_tflops", data.get("achievable_tflops")),
        cpu_clock_ghz=optional_positive_float("cpu_clock_ghz", data.get("cpu_clock_ghz")),
        baseline=baseline,
        telemetry=parse_telemetry(data.get("telemetry") or {}),
        equivalence_margin=positive_float("equivalence_margin", data.get("equivalence_margin", 0.02)),
    )
