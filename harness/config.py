"""Run configuration: the schema a composed Hydra config must satisfy, checked before anything runs.

Hydra composes plain YAML (configs/); `parse_run_config` turns the composed mapping into the engine's typed
settings (`xmfu.harness.engine.settings`) and rejects anything out of range with a `ConfigError` that names the
field and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from xmfu.harness.engine.settings import (
    ConfigError,
    MamfConfig,
    RocmConfig,
    RunConfig,
    TelemetryConfig,
    TimingConfig,
    boolean,
    check_keys,
    choice,
    int_list,
    number,
    optional_positive_float,
    positive_float,
    positive_int,
)
from xmfu.harness.machine.dtypes import DTYPES
from xmfu.harness.results.schema import RUN_ID

DEVICES = ("auto", "cpu", "gpu")
MAX_RESAMPLES = 100_000


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
            values[f.name] = number(path, raw, integer=False, minimum=0, inclusive=True)
        else:
            values[f.name] = positive_float(path, raw)
    timing = TimingConfig(**values)
    if timing.bootstrap_resamples > MAX_RESAMPLES:
        raise ConfigError("timing.bootstrap_resamples", f"{timing.bootstrap_resamples} is too many",
                          f"1 to {MAX_RESAMPLES} (1000 gives a stable 95% interval)")
    if timing.min_sample_s > timing.max_time_s:
        raise ConfigError("timing.min_sample_s", f"{timing.min_sample_s} exceeds timing.max_time_s "
                          f"{timing.max_time_s}: not one sample would fit the budget", "min_sample_s <= max_time_s")
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


def parse_rocm(data: Mapping[str, Any]) -> RocmConfig:
    check_keys("rocm", data, [f.name for f in fields(RocmConfig)])
    limit = data.get("tunableop_max_tuning_ms")
    return RocmConfig(tunableop=boolean("rocm.tunableop", data.get("tunableop", False)),
                      tunableop_max_tuning_ms=None if limit is None else positive_int("rocm.tunableop_max_tuning_ms",
                                                                                       limit))




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


SCALES = ("full", "smoke")
TOP_LEVEL = (
    "scale", "workload", "backends", "dtype", "timing", "mamf", "device", "results_dir", "run_id", "seed",
    "peak_tflops", "peak_membw_gbps", "achievable_tflops", "cpu_clock_ghz", "baseline", "equivalence_margin",
    "model",  # the model preset group; the transformer workload reads it through ${model}
    "telemetry", "rocm", "repeats", "device_index",
    "suite", "price", "store",  # a suite's definition and its settings (harness/suites/suite.py reads them)
)
SUITE_ONLY = {"price": "xmfu compare --price", "store": "xmfu history add"}  # meaningless in a single run


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
    removed, so the workload spec only ever sees its own settings.
    """
    out = dict(data)
    scale = choice("scale", data.get("scale", "full"), SCALES)
    workload = data.get("workload")
    if not isinstance(workload, Mapping):
        return out
    smoke = workload.get("smoke") or {}
    if not isinstance(smoke, Mapping):
        raise ConfigError("workload.smoke", f"{smoke!r} is not a mapping", "a mapping of workload settings")
    effective = {k: v for k, v in workload.items() if k != "smoke"}
    if scale == "smoke":
        effective.update({k: v for k, v in smoke.items() if k not in explicit})
    out["workload"] = effective
    return out


def parse_run_config(data: Mapping[str, Any], backends_by_workload: Mapping[str, Sequence[str]],
                     explicit: set[str] | frozenset[str] = frozenset()) -> RunConfig:
    """Validate a composed config (plain mapping) against the schema and the registered backends.

    `explicit`: the workload settings the command line named (see `apply_scale`).
    """
    check_keys("", data, TOP_LEVEL)
    data = apply_scale(data, explicit)
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
    _suite_settings_need_a_suite(data)
    run_id = parse_run_id(data.get("run_id"))
    results_dir = parse_results_dir(data.get("results_dir", "results"))
    return RunConfig(
        workload=dict(workload),
        backends=chosen,
        dtype=choice("dtype", data.get("dtype"), list(DTYPES)),
        timing=parse_timing(data.get("timing") or {}),
        mamf=parse_mamf(data.get("mamf") or {}, backends_by_workload.get("matmul", [])),
        device=choice("device", data.get("device", "auto"), DEVICES),
        results_dir=results_dir,
        run_id=run_id,
        seed=number("seed", data.get("seed", 0), integer=True, minimum=0, inclusive=True),
        peak_tflops=optional_positive_float("peak_tflops", data.get("peak_tflops")),
        peak_membw_gbps=optional_positive_float("peak_membw_gbps", data.get("peak_membw_gbps")),
        achievable_tflops=optional_positive_float("achievable_tflops", data.get("achievable_tflops")),
        cpu_clock_ghz=optional_positive_float("cpu_clock_ghz", data.get("cpu_clock_ghz")),
        baseline=baseline,
        telemetry=parse_telemetry(data.get("telemetry") or {}),
        rocm=parse_rocm(data.get("rocm") or {}),
        repeats=positive_int("repeats", data.get("repeats", 1)),
        equivalence_margin=positive_float("equivalence_margin", data.get("equivalence_margin", 0.02)),
        device_index=parse_device_index(data.get("device_index")),
    )


def parse_device_index(value: Any) -> int | None:
    """null (the local rank's device), or a local device's number (checked against the devices at start-up)."""
    return None if value is None else number("device_index", value, integer=True, minimum=0, inclusive=True)


def _suite_settings_need_a_suite(data: Mapping[str, Any]) -> None:
    if data.get("suite") is not None:
        return
    for name, instead in SUITE_ONLY.items():
        if data.get(name) is not None:
            raise ConfigError(name, "applies to suite runs only (experiment=acceptance, experiment=nightly)",
                              f"null here; for a single run see {instead}")
