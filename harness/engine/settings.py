"""The typed settings the engine reads, each declared once (`xmfu.harness.engine.declare.setting`: type, default,
help and allowed range in one field).

The front door (`xmfu.harness.config.run_settings`) parses a composed Hydra config into these frozen dataclasses, and
derives from them the structured configs Hydra composes with (configs/ then states only what differs from a default).
`RunConfig` has no defaults of its own: the run-level settings are declared where the front door reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xmfu.harness.engine.declare import NON_NEGATIVE, POSITIVE, POSITIVE_INT, OneOf, Range, setting
from xmfu.harness.results.statistics.summary import BOOTSTRAP_RESAMPLES

MAX_RESAMPLES = 100_000
MAMF_SIZES = (4096, 8192, 12288, 16384)  # each of m, n and k
# How an achievable peak was measured (a row's `achievable_method`): `flushed` is stas00's mamf-finder's method,
# whose published table anchors "achievable": `l2_cache.zero_()` on a 256 MiB buffer before every timed call
# (ml-engineering compute/accelerator/benchmarks/mamf-finder.py, benchmark_version 2, benchmark_mm); `warm` times
# back-to-back calls, which on the project's CPU read 1.4-1.8x higher than that method (issue 30).
ACHIEVABLE_METHODS = ("flushed", "warm")
MAMF_SMOKE_SIZES = (256, 512)  # scale=smoke's sweep (harness/config/run_settings.py): 8 shapes, seconds on a CPU


@dataclass(frozen=True)
class TimingConfig:
    """How one (case, backend) is timed (configs/timing/: default, quick, sustained). Durations are seconds."""

    warmup_s: float = setting(0.5, "untimed calls first, for at least this long (0: warmup_min_iters only)",
                              NON_NEGATIVE)
    warmup_min_iters: int = setting(3, "untimed calls first, at least this many", POSITIVE_INT)
    min_sample_s: float = setting(0.001, "each sample runs enough back-to-back calls to last this long", POSITIVE)
    max_inner: int = setting(1000, "at most this many back-to-back calls per sample", POSITIVE_INT)
    min_samples: int = setting(10, "samples per backend before the stop rule is asked", POSITIVE_INT)
    max_samples: int = setting(500, "samples per backend at most", POSITIVE_INT)
    round_samples: int = setting(5, "samples per backend per interleaved round", POSITIVE_INT)
    target_rel_ci: float = setting(0.01, "stop once the 95% CI half-width of the median is this fraction of it",
                                   Range(maximum=1))
    max_time_s: float = setting(10.0, "time budget per case, all backends together", POSITIVE)
    cold_cache: bool = setting(False, "rotate input copies larger than the last-level cache")
    flush_l2: bool = setting(False, "overwrite 2x the last-level cache before every timed call, outside the timing")
    fresh_inputs: bool = setting(False, "write new inputs (a new seed) before every timed call, outside the timing "
                                 "(its cost stated in the row); the last timed output is re-checked against them")
    cuda_graph: bool = setting(False, "torch on GPUs: time replays of a CUDA/HIP graph of the calls (no launch "
                               "overhead)")
    bootstrap_resamples: int = setting(BOOTSTRAP_RESAMPLES, "resamples of every bootstrap confidence interval",
                                       Range(1, True, MAX_RESAMPLES, True, integer=True,
                                             note="(1000 gives a stable 95% interval)"))
    sustain_s: float = setting(0.0, "> 0: sample for exactly this long (no CI stop) and report the steady state",
                               NON_NEGATIVE)
    window_s: float = setting(10.0, "sustained runs: the steady-state analysis window", POSITIVE)
    steady_tolerance: float = setting(0.02, "sustained runs: windows within this fraction of the final one count "
                                      "as steady", POSITIVE)

    def protocol(self) -> dict[str, Any]:
        """The settings that change what a number means (not only how precise it is)."""
        out = {"protocol": "xmfu.timing/1", "statistic": "median", "cold_cache": self.cold_cache,
               "sustained": self.sustain_s > 0}
        # Named only when on, so the keys of runs that never used them (older bundles too) are unchanged.
        out.update({name: True for name in ("flush_l2", "cuda_graph", "fresh_inputs") if getattr(self, name)})
        return out


@dataclass(frozen=True)
class TelemetryConfig:
    """Power, clocks, temperature and throttling sampled around every timed window (NVML, amdsmi, RAPL/sysfs)."""

    enabled: bool = setting(True, "sample telemetry around every timed window")
    rate_hz: float = setting(20.0, "samples per second", POSITIVE)


@dataclass(frozen=True)
class OutputConfig:
    """What a run prints at its end (the bundle keeps every field whatever is printed)."""

    wide: bool = setting(False, "the end table with every column, one line per row; false: the columns that vary "
                         "and the figures, fitted to 120 columns")


@dataclass(frozen=True)
class RocmConfig:
    """AMD only: PyTorch TunableOp's tuning pass before timing (tuning time recorded, not timed; the tuned GEMM
    solutions kept in the bundle as tunableop_results.csv). Rows record the setting either way, so "ROCm with
    tuning" and "ROCm out of the box" are two labelled figures."""

    tunableop: bool = setting(False, "run PyTorch TunableOp's tuning pass before timing")
    tunableop_max_tuning_ms: int | None = setting(None, "tuning time per GEMM solution; null: torch's default",
                                                  POSITIVE_INT)


@dataclass(frozen=True)
class MamfConfig:
    """Maximum achievable matmul FLOPS: a sweep over m x n x k run before the main workload when enabled. Its best
    timing-valid result becomes the denominator of mfu_vs_achievable in the later rows."""

    enabled: bool = setting(False, "run the sweep before the main workload (experiment=mamf)")
    method: str = setting("flushed", "flushed: a buffer of at least 2x the last-level cache overwritten before every "
                          "timed call, as mamf-finder (whose published table is the anchor) does | warm: "
                          "back-to-back calls, caches warm (reads higher)", OneOf(ACHIEVABLE_METHODS))
    backend: str = setting("torch", "the matmul backend that runs the sweep")
    m: tuple[int, ...] = setting(MAMF_SIZES, "M sizes swept", POSITIVE_INT)
    n: tuple[int, ...] = setting(MAMF_SIZES, "N sizes swept", POSITIVE_INT)
    k: tuple[int, ...] = setting(MAMF_SIZES, "K sizes swept", POSITIVE_INT)


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
    """One run as the engine reads it. Built by the front door from the declared settings
    (harness/config/run_settings.py declares the run-level ones, this module the sections), so no default is repeated
    here."""

    workload: Mapping[str, Any]
    backends: tuple[str, ...]
    dtype: str
    timing: TimingConfig
    mamf: MamfConfig
    device: str
    results_dir: str
    run_id: str | None
    seed: int
    peak_tflops: float | None
    peak_membw_gbps: float | None  # peak memory bandwidth (GB/s) to divide by: the MBU denominator
    achievable_tflops: float | None
    achievable_method: str  # how achievable_tflops was measured: flushed, warm or "not stated"
    cpu_clock_ghz: float | None
    baseline: str | None  # backend every other one is compared with (speedup, CI, verdict)
    telemetry: TelemetryConfig
    rocm: RocmConfig
    repeats: int  # the whole measurement (prepare, warm up, sample) this many times per case and backend
    equivalence_margin: float  # speedups within 1 +- this count as equivalent
    device_index: int | None  # measure this local device instead of the local rank's
    suite: SuiteTag | None = field(default=None)  # set by harness/suites/suite.py for its parts
    output: OutputConfig = field(default_factory=OutputConfig)  # what the run prints; no figure depends on it
    scale: str = "full"  # full, or smoke: shrunk by harness/config/run_settings.py (scale=smoke)
    # what scale=smoke shrank, in words, by phase ("mamf", "main"): printed, and kept in the manifest and the rows
    scale_notes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # whether the config named its backends (False: `backends: null`, every built-in); a backend the catalog runs on a
    # CPU only when named (Implementation.cpu_when_named) is skipped, saying so, in a CPU run that did not name it
    backends_named: bool = True

    def protocol(self, phase: str = "main") -> dict[str, Any]:
        """The timing protocol and, for a suite's part, the suite it belongs to: what joins the comparability
        key besides the case itself. Plain runs keep the keys they always had. The mamf sweep is flushed as
        `mamf.method` says (timing.flush_l2 is the other phases'), so flushed and warm sweeps never compare."""
        out = self.timing.protocol()
        if phase == "mamf":
            out.pop("flush_l2", None)
            out.update({"flush_l2": True} if self.mamf.method == "flushed" else {})
        if self.suite is not None:
            out["suite"] = self.suite.key()
        return out

    @property
    def workload_name(self) -> str:
        return str(self.workload["name"])
