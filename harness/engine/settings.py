"""The typed settings the engine and the workloads read, and the validators that build them.

The front door (`xmfu.harness.config`) turns a composed Hydra config into these frozen dataclasses; a workload's
spec parses its own `workload.*` section with the same validators. Anything out of range raises a
`ConfigError` naming the field and what is allowed; the CLI turns it into one paragraph and exit status 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


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
    flush_l2: bool = False  # overwrite 2x the last-level cache before every timed call (outside the timing)
    cuda_graph: bool = False  # torch on GPUs: time replays of a CUDA/HIP graph of the calls (no launch overhead)
    bootstrap_resamples: int = 1000
    sustain_s: float = 0.0  # > 0: sample for exactly this long (no CI stop) and report the steady state
    window_s: float = 10.0  # steady-state analysis window
    steady_tolerance: float = 0.02  # windows within this of the final one count as steady

    def protocol(self) -> dict[str, Any]:
        """The settings that change what a number means (not only how precise it is)."""
        out = {"protocol": "xmfu.timing/1", "statistic": "median", "cold_cache": self.cold_cache,
               "sustained": self.sustain_s > 0}
        # Named only when on, so the keys of runs that never used them (older bundles too) are unchanged.
        out.update({name: True for name in ("flush_l2", "cuda_graph") if getattr(self, name)})
        return out


@dataclass(frozen=True)
class TelemetryConfig:
    """Power/clock/temperature sampling around every timed window."""

    enabled: bool = True
    rate_hz: float = 20.0


@dataclass(frozen=True)
class RocmConfig:
    """AMD-only settings that decide the realized GEMM speed (recorded in every row either way)."""

    tunableop: bool = False  # run PyTorch TunableOp's tuning pass before timing; its results go in the bundle
    tunableop_max_tuning_ms: int | None = None  # per GEMM solution; None: torch's default


@dataclass(frozen=True)
class MamfConfig:
    """Maximum achievable matmul FLOPS sweep, run before the main workload when enabled."""

    enabled: bool = False
    backend: str = "torch"
    m: tuple[int, ...] = ()
    n: tuple[int, ...] = ()
    k: tuple[int, ...] = ()


@dataclass(frozen=True)
class SuiteTag:
    """The suite a run is one part of (harness/suites/suite.py). `definition_sha` hashes the suite's definition and
    joins the comparability key of every row, so a changed suite starts new series in a history store."""

    name: str
    version: int
    definition_sha: str
    suite_id: str  # shared by every part of one suite run
    part: str
    host: str

    def key(self) -> str:
        return f"{self.name}/{self.version}/{self.definition_sha}"


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
    peak_membw_gbps: float | None = None  # peak memory bandwidth (GB/s) to divide by: the MBU denominator
    achievable_tflops: float | None = None
    cpu_clock_ghz: float | None = None
    baseline: str | None = None  # backend every other one is compared with (speedup, CI, verdict)
    telemetry: TelemetryConfig = TelemetryConfig()
    rocm: RocmConfig = RocmConfig()
    repeats: int = 1  # the whole measurement (prepare, warm up, sample) this many times per case and backend
    equivalence_margin: float = 0.02  # speedups within 1 +- this count as equivalent
    device_index: int | None = None  # measure this local device instead of the local rank's
    suite: SuiteTag | None = None  # set by harness/suites/suite.py for its parts

    def protocol(self) -> dict[str, Any]:
        """The timing protocol and, for a suite's part, the suite it belongs to: what joins the comparability
        key besides the case itself. Plain runs keep the keys they always had."""
        out = self.timing.protocol()
        if self.suite is not None:
            out["suite"] = self.suite.key()
        return out

    @property
    def workload_name(self) -> str:
        return str(self.workload["name"])


def number(field: str, value: Any, *, integer: bool, minimum: float, inclusive: bool = False) -> Any:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(field, f"{value!r} is not {kind}", f"{kind} {'>=' if inclusive else '>'} {minimum:g}")
    if integer and not float(value).is_integer():
        raise ConfigError(field, f"{value!r} is not an integer", f"an integer > {minimum:g}")
    if not math.isfinite(value) or (value < minimum if inclusive else value <= minimum):
        raise ConfigError(field, f"{value!r} is out of range", f"{kind} {'>=' if inclusive else '>'} {minimum:g}")
    return int(value) if integer else float(value)


def positive_int(field: str, value: Any) -> int:
    return number(field, value, integer=True, minimum=0)


def positive_float(field: str, value: Any) -> float:
    return number(field, value, integer=False, minimum=0)


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
