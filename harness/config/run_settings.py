"""Run configuration: every setting `xmfu run` reads, declared once, and the checks that turn it into the engine's
typed settings before anything runs.

`RunSettings` declares the run-level settings (type, default, help, allowed values); it holds the engine's sections
(`xmfu.harness.engine.settings`: timing, telemetry, rocm, mamf) and a suite's definition (harness/config/suite_spec.py),
each declared where it is read. Hydra composes configs/ on top of their structured-config twins
(harness/config/hydra_app.py registers them), so the YAML states only what differs from a default. `parse_run_config`
checks a composed mapping, or the Python API's partial one, against the declarations and the registered backends:
a bad value is a `ConfigError` naming the field and what is allowed. `apply_scale` shrinks a composed config at
scale=smoke (below).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from xmfu.harness.config.suite_spec import SuiteSettings
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
from xmfu.harness.engine.settings import (
    ACHIEVABLE_METHODS,
    MAMF_SIZES,
    MAMF_SMOKE_SIZES,
    MamfConfig,
    OutputConfig,
    RocmConfig,
    RunConfig,
    TelemetryConfig,
    TimingConfig,
)
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.dtypes import DTYPES
from xmfu.harness.results.schema import RUN_ID
from xmfu.harness.results.statistics.summary import EQUIVALENCE_MARGIN

SCALES = ("full", "smoke")
DEVICES = ("auto", "cpu", "gpu")
FRACTION = Range(inclusive=True, maximum=1)


@dataclass(frozen=True)
class RunSettings:
    """What `xmfu run` reads. Every field can be overridden on the command line, e.g.
      xmfu run workload=matmul backends=[torch,jax] dtype=fp32 timing=quick results_dir=/tmp/r
      xmfu run -m dtype=fp32,bf16          (Hydra multirun: one bundle per combination)"""

    scale: str = setting("full", "full: the sizes as configured | smoke: seconds on a CPU (the workload's `smoke:` "
                         "sizes, the mamf sweep at 256/512, any model preset as tiny, a suite's smoke parts)",
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
    achievable_method: str = setting("not stated", "how achievable_tflops was measured (its mamf rows' "
                                     "achievable_method): flushed | warm | not stated",
                                     OneOf((*ACHIEVABLE_METHODS, "not stated")))
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
    price_kwh: float | None = setting(None, "suites: USD per kWh: the cost's energy line (the rows' measured energy "
                                      "x pue x price_kwh), shown apart from the device-hour price", POSITIVE)
    pue: float | None = setting(None, "suites: the facility's power usage effectiveness, with price_kwh (unset: "
                                "device energy alone)", Range(minimum=1, inclusive=True,
                                                              note="(total facility power / IT equipment power)"))
    capex_usd: float | None = setting(None, "suites, ownership: USD paid per device; with amortize_years it sets the "
                                      "device-hour price (capex / (years x 8760 h)) in place of price", POSITIVE)
    amortize_years: float | None = setting(None, "suites, ownership: years capex_usd is written off over",
                                           POSITIVE)
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
    if timing.fresh_inputs and (timing.cuda_graph or timing.cold_cache):
        # Fresh inputs are written into one set of buffers before every single call (engine/fresh.py): a graph
        # replays a sample's calls with no write between them, and rotated copies would leave the others stale.
        other = "timing.cuda_graph" if timing.cuda_graph else "timing.cold_cache"
        raise ConfigError(other, "cannot be combined with timing.fresh_inputs: new inputs are written into one set "
                          "of buffers before every single call (timing.flush_l2=true gives those calls a cold cache)",
                          f"timing.fresh_inputs=true or {other}=true, not both")
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


# `scale=smoke`: one switch that shrinks whatever a run would measure to sizes that take seconds on a CPU.
#
# A composed config is shrunk in four places, each only where the command line did not name the setting itself
# (what is named explicitly wins over the smoke sizes):
# - the workload: its file's `smoke:` block (configs/workload/<name>.yaml) is folded over its settings, so an
#   experiment's sizes (experiment=mamf's 4096/8192, the shoot-out's batch_seq) give way too;
# - the mamf sweep: m, n and k become MAMF_SMOKE_SIZES instead of 4096..16384 (64 shapes, hours on a CPU);
# - the model preset (transformer, inference): any preset is replaced by configs/model/tiny.yaml's shapes (a mixture of
#   experts by moe-tiny.yaml's), and the
#   preset asked for is named in the run's record, so a row never passes for the preset's figure;
# - the timing, where it is the default (10 s a case): timing=quick's budget (2 s a case).
# Each shrink is described in words (`Scaled.notes`, by phase), which the run prints and writes into the manifest
# and into every row it applies to.


def _config_dir() -> Path:
    """The config groups: `harness/conf/` in an installed package (a wheel or `pip install .`: pyproject.toml's
    package-dir ships the repository's configs/ as the package `xmfu.harness.conf`), else the checkout's own
    configs/ (a source tree, or `pip install -e .`, which leaves every file where it is).

    Hydra gets the folder as an absolute path (file://): hydra.main and initialize_config_dir take one as is
    (hydra 1.3.8 _internal/utils.py compute_search_path_dir). `pkg://harness.conf` would need configs/ importable
    as that module, which a source checkout on PYTHONPATH never is.
    """
    harness = Path(__file__).resolve().parent.parent  # harness/config/ -> harness/
    packaged = harness / "conf"
    return packaged if packaged.is_dir() else harness.parent / "configs"


CONFIG_DIR = _config_dir()
SMOKE_MODEL = "tiny"  # the preset (configs/model/tiny.yaml) every other preset is replaced by at smoke scale
SMOKE_MOE_MODEL = "moe-tiny"  # ... and every mixture-of-experts preset (n_experts > 0), so it stays one
MAMF_KEYS = ("m", "n", "k")


@dataclass(frozen=True)
class Scaled:
    """A composed config with its scale applied, and what the shrink changed, in words, per phase."""

    data: dict[str, Any]
    notes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "mamf" / "main" -> sentences


def explicit_keys(overrides: Sequence[str]) -> set[str]:
    """The dotted settings the command line named (`workload.sizes`, `mamf.m`, `model.seq_len`): they win over
    the smoke sizes."""
    keys = set()
    for override in overrides:
        name = override.lstrip("+~").split("=", 1)[0]
        if "." in name and not name.startswith("hydra"):
            keys.add(".".join(name.split(".")[:2]))
    return keys


# xmfu's own config files, read by every command that re-plans a bundle's run: libyaml's loader where PyYAML has one
# (both read every packaged file alike: tests/test_config.py).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _group_option(group: str, option: str) -> dict[str, Any]:
    """configs/<group>/<option>.yaml as a mapping (read once)."""
    return dict(yaml.load((CONFIG_DIR / group / f"{option}.yaml").read_text(), Loader=_LOADER) or {})


def smoke_model(moe: bool = False) -> dict[str, Any]:
    """configs/model/tiny.yaml (moe-tiny.yaml for a mixture of experts): the shapes every other preset is replaced
    by at smoke scale."""
    return _group_option("model", SMOKE_MOE_MODEL if moe else SMOKE_MODEL)


def apply_scale(data: Mapping[str, Any], explicit: set[str] | frozenset[str] = frozenset()) -> Scaled:
    """`data` with its `scale` applied. The workload's `smoke:` block is always removed, so the spec only ever
    sees its own settings; at scale=smoke it is folded in first. (`scale` itself is checked with the rest.)"""
    out = dict(data)
    workload = data.get("workload")
    if not isinstance(workload, Mapping):
        return Scaled(out)
    smoke = workload.get("smoke") or {}
    if not isinstance(smoke, Mapping):
        raise ConfigError("workload.smoke", f"{smoke!r} is not a mapping", "a mapping of workload settings")
    effective = {k: v for k, v in workload.items() if k != "smoke"}
    out["workload"] = effective
    if data.get("scale") != "smoke":
        return Scaled(out)
    main: list[str] = []
    folded = {k: v for k, v in smoke.items() if f"workload.{k}" not in explicit}
    changed = sorted(k for k, v in folded.items() if effective.get(k) != v)
    effective.update(folded)
    if changed:
        main.append(f"workload {effective.get('name')}: its smoke sizes (configs/workload/*.yaml `smoke:`) for "
                    f"{', '.join(changed)}")
    main += _shrink_model(out, effective, explicit)
    timing = _shrink_timing(out, explicit)
    notes = {"main": (*main, *timing)} if main or timing else {}
    mamf = _shrink_mamf(out, explicit)
    return Scaled(out, {**notes, **({"mamf": (*mamf, *timing)} if mamf else {})})


def _shrink_timing(out: dict[str, Any], explicit: set[str] | frozenset[str]) -> tuple[str, ...]:
    """The default timing (10 s a case) becomes timing=quick's (2 s a case): the smoke sweep of experiment=mamf took
    12 s a case on the project's 2-core VM at the default. Any other timing (timing=sustained, timing.* named)
    is kept as chosen."""
    timing = out.get("timing")
    if not isinstance(timing, Mapping) or any(k.startswith("timing.") for k in explicit):
        return ()
    if dict(timing) != asdict(TimingConfig()):
        return ()
    out["timing"] = {**timing, **_group_option("timing", "quick")}
    return ("timing: timing=quick's budget instead of the default's (a 5% CI within 2 s a case, not 1% within 10 s)",)


def _shrink_mamf(out: dict[str, Any], explicit: set[str] | frozenset[str]) -> tuple[str, ...]:
    mamf = dict(out.get("mamf") or {})
    # only the declared sizes: a config.yaml written at smoke scale re-reads as it ran (the validator plans it again)
    shrunk = [k for k in MAMF_KEYS if f"mamf.{k}" not in explicit and tuple(mamf.get(k, MAMF_SIZES)) == MAMF_SIZES]
    for key in shrunk:
        mamf[key] = list(MAMF_SMOKE_SIZES)
    out["mamf"] = mamf
    if not (shrunk and mamf.get("enabled")):
        return ()
    sizes = "/".join(str(s) for s in MAMF_SMOKE_SIZES)
    return (f"mamf sweep at smoke sizes: {', '.join(shrunk)} in {sizes} (not the full sweep: its best is no "
            "achievable peak of this device's large matmuls)",)


def _shrink_model(out: dict[str, Any], workload: dict[str, Any], explicit: set[str] | frozenset[str]) -> list[str]:
    """A workload with a `model` (transformer, inference) runs the tiny preset's shapes instead of another
    preset's; model settings named on the command line keep their values."""
    model = workload.get("model")
    moe = isinstance(model, Mapping) and bool(model.get("n_experts"))
    if not isinstance(model, Mapping) or model.get("name") == (SMOKE_MOE_MODEL if moe else SMOKE_MODEL):
        return []
    asked = model.get("name")
    named = {k: v for k, v in model.items() if f"model.{k}" in explicit}
    tiny = {**smoke_model(moe), **named}
    workload["model"] = tiny
    if isinstance(out.get("model"), Mapping):
        out["model"] = dict(tiny)
    return [f"model preset {asked} replaced by the {tiny['name']} preset's shapes (scale=smoke): these rows are "
            f"not the {asked} preset's figures"]


# What else `backends` takes: plug-ins (harness/engine/plugins.py registers the ones a config names before this
# check, so a name still unknown here is neither a built-in nor a plug-in that could be found).
PLUGIN_NAMES = ("or a plug-in: module.path:object, or the name of an installed one (xmfu run --help lists them; "
                "docs/backends.md)")


def _backends(value: Any, known: list[str]) -> tuple[str, ...]:
    """The chosen backends, in order; null: every backend the workload has (the unavailable ones report skipped)."""
    backends = known if value is None else [value] if isinstance(value, str) else value
    if not isinstance(backends, Sequence) or not backends:
        raise ConfigError("backends", f"{backends!r} is not a non-empty list", f"a list drawn from {known}")
    for i, b in enumerate(backends):
        if b not in known:
            raise ConfigError(f"backends[{i}]", f"unknown value {b!r}", f"{', '.join(known)}, {PLUGIN_NAMES}")
    chosen = tuple(str(b) for b in backends)
    if len(set(chosen)) != len(chosen):
        raise ConfigError("backends", f"{list(chosen)} names a backend twice", f"distinct names from {known}")
    return chosen


def parse_run_config(data: Mapping[str, Any], backends_by_workload: Mapping[str, Sequence[str]],
                     explicit: set[str] | frozenset[str] = frozenset()) -> RunConfig:
    """Validate a composed config (or a partial one: the rest takes the declared defaults) against the
    declarations and the registered backends. `explicit`: the dotted settings the command line named (see
    `apply_scale`). The workload's own settings are its spec's to check (when the run expands into cases)."""
    scaled = apply_scale(data, explicit)
    s = parse_section("", RunSettings, scaled.data)
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
        achievable_method=s.achievable_method,
        cpu_clock_ghz=s.cpu_clock_ghz, baseline=s.baseline, telemetry=s.telemetry, rocm=s.rocm, repeats=s.repeats,
        equivalence_margin=s.equivalence_margin, device_index=s.device_index, scale=s.scale,
        scale_notes=scaled.notes, output=s.output, backends_named=s.backends is not None)


def _suite_settings_need_a_suite(s: RunSettings) -> None:
    if s.suite is not None:
        return
    for name, instead in SUITE_ONLY.items():
        if getattr(s, name) is not None:
            raise ConfigError(name, "applies to suite runs only (experiment=acceptance, experiment=nightly)",
                              f"null here; for a single run see {instead}")
