"""Run configuration: every setting `xmfu run` reads, declared once, and the checks that turn it into the engine's
typed settings before anything runs.

`RunSettings` declares the run-level settings (type, default, help, allowed values); it holds the engine's sections
(`xmfu.harness.engine.settings`: timing, telemetry, rocm, mamf) and a suite's definition (harness/suites/spec.py),
each declared where it is read. Hydra composes configs/ on top of their structured-config twins
(harness/hydra_app.py registers them), so the YAML states only what differs from a default. `parse_run_config`
checks a composed mapping, or the Python API's partial one, against the declarations and the registered backends:
a bad value is a `ConfigError` naming the field and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmfu.harness.engine.declare import (
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    ConfigError,
    OneOf,
    Range,
    choice,
    setting,
)
from xmfu.harness.engine.settings import MamfConfig, OutputConfig, RocmConfig, RunConfig, TelemetryConfig, TimingConfig
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.dtypes import DTYPES
from xmfu.harness.results.schema import RUN_ID
from xmfu.harness.results.stats import EQUIVALENCE_MARGIN
from xmfu.harness.suites.spec import SuiteSettings

SCALES = ("full", "smoke")
DEVICES = ("auto", "cpu", "gpu")
FRACTION = Range(inclusive=True, maximum=1)


@dataclass(frozen=True)
class RunSettings:
    """What `xmfu run` reads. Every field can be overridden on the command line, e.g.
      xmfu run workload=matmul backends=[torch,jax] dtype=fp32 timing=quick results_dir=/tmp/r
      xmfu run -m dtype=fp32,bf16          (Hydra multirun: one bundle per combination)"""

    scale: str = setting("full", "full: the workload's own sizes | smoke: its `smoke:` sizes (seconds on a CPU)",
                         OneOf(SCALES))
    backends: Any = setting(None, "implementations to run, interleaved case by case; null: every one the "
                            "workload has")
    dtype: str = setting("bf16", "the data type every case computes in", OneOf(tuple(DTYPES)))
    device: str = setting("auto", "gpu fails if no accelerator is visible", OneOf(DEVICES))
    results_dir: str = setting("results", "bundles go to <results_dir>/<run_id>/")
    run_id: str | None = setting(None, "null: <UTC time>-<workload>-<dtype>-<random>")
    seed: int = setting(0, "one seed for every backend's inputs", NON_NEGATIVE_INT)
    peak_tflops: float | None = setting(None, "dense TFLOP/s to divide by, for a device not in the peak table",
                                        POSITIVE)
    peak_membw_gbps: float | None = setting(None, "peak memory bandwidth (GB/s) to divide by (MBU), for a device "
                                            "not in the table", POSITIVE)
    achievable_tflops: float | None = setting(None, "achievable peak from an earlier mamf run, for "
                                              "mfu_vs_achievable", POSITIVE)
    cpu_clock_ghz: float | None = setting(None, "CPU peak estimate: the clock to assume instead of the one read "
                                          "from the OS", POSITIVE)
    baseline: str | None = setting(None, "a backend of this run: the others get a speedup against it, with a 95% "
                                   "CI and a verdict")
    equivalence_margin: float = setting(EQUIVALENCE_MARGIN, "speedups whose 95% CI lies within 1 +- this are "
                                        "\"equivalent\" (xmfu compare --margin too)", FRACTION)
    repeats: int = setting(1, "the whole measurement N times per case and backend (interleaved): the CI then "
                           "includes the spread between repeats (two-stage bootstrap)", POSITIVE_INT)
    device_index: int | None = setting(None, "measure this local device (0, 1, ...) instead of the local rank's",
                                       NON_NEGATIVE_INT)
    suite: SuiteSettings | None = setting(None, "a suite's definition (experiment=acceptance, "
                                          "experiment=nightly); null for a single run")
    price: float | None = setting(None, "suites: USD per device-hour, for cost per million tokens and per "
                                  "PFLOP-hour", POSITIVE)
    store: str | None = setting(None, "suites: a history store (folder) the suite's bundles are appended to")
    telemetry: TelemetryConfig = setting(TelemetryConfig(), TelemetryConfig.__doc__)
    rocm: RocmConfig = setting(RocmConfig(), RocmConfig.__doc__)
    mamf: MamfConfig = setting(MamfConfig(), MamfConfig.__doc__)
    workload: Any = setting(None, "the workload's own settings (workload=NAME chooses it; below)")
    timing: TimingConfig = setting(TimingConfig(), TimingConfig.__doc__)
    model: Any = setting(None, "the transformer and inference presets (model=NAME); other workloads ignore it")
    output: OutputConfig = setting(OutputConfig(), OutputConfig.__doc__)


SUITE_ONLY = {"price": "xmfu compare --price", "store": "xmfu history add"}  # meaningless in a single run


def check_timing(timing: TimingConfig) -> TimingConfig:
    """What relates two timing settings (each one is checked against its declaration when parsed)."""
    if timing.min_sample_s > timing.max_time_s:
        raise ConfigError("timing.min_sample_s", f"{timing.min_sample_s} exceeds timing.max_time_s "
                          f"{timing.max_time_s}: not one sample would fit the budget", "min_sample_s <= max_time_s")
    if timing.max_samples < timing.min_samples:
        raise ConfigError("timing.max_samples", "is below timing.min_samples", f">= {timing.min_samples}")
    if timing.flush_l2 and timing.cuda_graph:
        # The flushing timer times each call alone with a flush before it (engine/timers.py FlushingTimer); a
        # graph replays a sample's calls back to back with no flush between them. Each asks for the other's
        # opposite, so one of them would be silently dropped while rows claimed both.
        raise ConfigError("timing.cuda_graph", "cannot be combined with timing.flush_l2: the flush runs before "
                          "every single call, a graph replays a sample's calls with no flush between them",
                          "timing.flush_l2=true or timing.cuda_graph=true, not both")
    return timing


def check_mamf(mamf: MamfConfig, backends: Sequence[str]) -> MamfConfig:
    """`backends` are the matmul workload's: the sweep is always a matmul."""
    if mamf.enabled:
        choice("mamf.backend", mamf.backend, backends)
        if not (mamf.m and mamf.n and mamf.k):
            raise ConfigError("mamf", "enabled but m, n or k is empty", "non-empty lists of sizes")
    return mamf


def parse_run_id(value: Any) -> str | None:
    """null, or a plain folder name (numbers are taken as names: run_id=123)."""
    if value is None:
        return None
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not RUN_ID.match(text):
        raise ConfigError("run_id", f"{value!r} is not a usable folder name",
                          "null, or up to 128 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return text


def parse_results_dir(value: Any) -> str:
    """A folder that is, or can become, a directory: not empty, not an existing file."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("results_dir", f"{value!r} is not a folder", "a path to a folder (created if missing)")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ConfigError("results_dir", f"{value!r} is a file, not a folder", "a path to a folder")
    if path.is_dir() and not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError("results_dir", f"{value!r} is not writable", "a folder this user can write in")
    return value


def explicit_workload_keys(overrides: Sequence[str]) -> set[str]:
    """The `workload.<key>` settings named on the command line (they win over the smoke sizes)."""
    keys = set()
    for override in overrides:
        name = override.lstrip("+~").split("=", 1)[0]
        if name.startswith("workload."):
            keys.add(name.split(".")[1])
    return keys


def apply_scale(data: Mapping[str, Any], explicit: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """The composed config with its `scale` applied to the workload.

    Each workload file may hold a `smoke:` block: the sizes `scale=smoke` (experiment=smoke) runs instead of
    its full ones. The block is folded in (keys the command line set explicitly keep their values) and
    removed, so the workload spec only ever sees its own settings. (`scale` itself is checked with the rest.)
    """
    out = dict(data)
    workload = data.get("workload")
    if not isinstance(workload, Mapping):
        return out
    smoke = workload.get("smoke") or {}
    if not isinstance(smoke, Mapping):
        raise ConfigError("workload.smoke", f"{smoke!r} is not a mapping", "a mapping of workload settings")
    effective = {k: v for k, v in workload.items() if k != "smoke"}
    if data.get("scale") == "smoke":
        effective.update({k: v for k, v in smoke.items() if k not in explicit})
    out["workload"] = effective
    return out


def _backends(value: Any, known: list[str]) -> tuple[str, ...]:
    """The chosen backends, in order; null: every backend the workload has (the unavailable ones report skipped)."""
    backends = known if value is None else [value] if isinstance(value, str) else value
    if not isinstance(backends, Sequence) or not backends:
        raise ConfigError("backends", f"{backends!r} is not a non-empty list", f"a list drawn from {known}")
    chosen = tuple(choice(f"backends[{i}]", b, known) for i, b in enumerate(backends))
    if len(set(chosen)) != len(chosen):
        raise ConfigError("backends", f"{list(chosen)} names a backend twice", f"distinct names from {known}")
    return chosen


def parse_run_config(data: Mapping[str, Any], backends_by_workload: Mapping[str, Sequence[str]],
                     explicit: set[str] | frozenset[str] = frozenset()) -> RunConfig:
    """Validate a composed config (or a partial one: the rest takes the declared defaults) against the
    declarations and the registered backends. `explicit`: the workload settings the command line named (see
    `apply_scale`). The workload's own settings are its spec's to check (when the run expands into cases)."""
    s = parse_section("", RunSettings, apply_scale(data, explicit))
    workload = s.workload
    if not isinstance(workload, Mapping) or "name" not in workload:
        raise ConfigError("workload", "missing or has no name", ", ".join(sorted(backends_by_workload)))
    name = choice("workload", workload["name"], sorted(backends_by_workload))
    backends = _backends(s.backends, list(backends_by_workload[name]))
    if s.baseline is not None:
        choice("baseline", s.baseline, list(backends))
    _suite_settings_need_a_suite(s)
    return RunConfig(
        workload=dict(workload), backends=backends, dtype=s.dtype, timing=check_timing(s.timing),
        mamf=check_mamf(s.mamf, backends_by_workload.get("matmul", [])), device=s.device,
        results_dir=parse_results_dir(s.results_dir), run_id=parse_run_id(s.run_id), seed=s.seed,
        peak_tflops=s.peak_tflops, peak_membw_gbps=s.peak_membw_gbps, achievable_tflops=s.achievable_tflops,
        cpu_clock_ghz=s.cpu_clock_ghz, baseline=s.baseline, telemetry=s.telemetry, rocm=s.rocm, repeats=s.repeats,
        equivalence_margin=s.equivalence_margin, device_index=s.device_index, output=s.output)


def _suite_settings_need_a_suite(s: RunSettings) -> None:
    if s.suite is not None:
        return
    for name, instead in SUITE_ONLY.items():
        if getattr(s, name) is not None:
            raise ConfigError(name, "applies to suite runs only (experiment=acceptance, experiment=nightly)",
                              f"null here; for a single run see {instead}")
