"""The workloads' formulas, handed to the validator: what a bundle's rows must state for their params.

harness/results may not import a workload (tests/test_layout.py), so the front door, which may, turns a bundle's
config.yaml back into the cases the run measured, with the run's own planning (harness/run.py `plan_phases`:
the config parsed as `xmfu run` parses it, the mamf sweep and the main workload, fitted to the device
environment.json records), and gives the validator each row's params, FLOPs, bytes and the figures the workload's
formulas fix at the row's median time (bandwidth, work units, hardware FLOPs, communication bytes), and the timing
protocol its comparability fields must name (the config's, as the runner's `_protocol` keys each row), the figures
a workload derives from the row's raw samples (its `figures` hook: inference latencies and MBU), and the manifest's
comparability_key (harness/run.py `run_key`). One definition serves the run and `xmfu validate`.

Parsing a config and expanding its cases cost more than checking a bundle's rows (OmegaConf, with a workload of
2,000 sizes: 0.6 s), and a store's or a fleet's bundles share a few configs that differ in run_id and results_dir
alone: each distinct config's settings are parsed and planned once per process (_parsed_run, _cases), the bundle's
own run_id and results_dir checked for each bundle as parse_run_config checks them.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from functools import lru_cache
from typing import Any

import yaml

from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.plugins import placeholder
from xmfu.harness.engine.registry import Registry
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.roofline import Work
from xmfu.harness.results.rederive.roofline import ROOFLINE_WORK
from xmfu.harness.results.rederive.times import Restated, config_data


@lru_cache(maxsize=1)
def _registry() -> Registry:
    from xmfu.workloads.catalog import build_registry

    return build_registry()


def _device_entry(devices: list[dict[str, Any]]) -> dict[str, Any] | None:
    """environment.json's record of the device the run planned for (its first)."""
    return next((d for d in devices if {"kind", "name", "vendor"} <= set(d)), None)


def _device(devices: list[dict[str, Any]]) -> DeviceInfo | None:
    known = {f.name for f in dataclasses.fields(DeviceInfo)}
    entry = _device_entry(devices)
    return None if entry is None else DeviceInfo(**{k: v for k, v in entry.items() if k in known})


# A parsed run config and its planned cases are a function of config.yaml's settings alone (the registry's
# backends aside, which join the key): a store's or a fleet's bundles share few configs, which differ from bundle
# to bundle in run_id and results_dir only, so each distinct one is parsed (OmegaConf: 35 ms for a small config,
# 0.3 s with 2,000 sizes) and expanded into its cases once per process; every row is still checked against them.
CACHED_CONFIGS = 16
_RUNS: OrderedDict[Any, _Run] = OrderedDict()
_OWN = ("results_dir", "run_id")  # what a bundle's config.yaml holds of its own: parsed for each bundle


@dataclasses.dataclass
class _Run:
    cfg: Any  # RunConfig, as parse_run_config gave it for the first config of its key
    plans: dict[Any, Any] = dataclasses.field(default_factory=dict)  # device -> _plan's answer


@dataclasses.dataclass(frozen=True)
class _Config:
    cfg: Any  # RunConfig, as `xmfu run` parsed it from this config.yaml
    key: Any  # its settings but run_id and results_dir (hashable), or None: not remembered
    registry: Registry | None = None  # what the run planned with; None: the built-in workloads (_registry)


def _frozen(value: Any) -> Any:
    """A hashable image of YAML data that keeps apart what a parse may tell apart: types (1, 1.0, True and '1'),
    every float's exact value (-0.0), the order of keys. Raises TypeError for anything else (a date, a set)."""
    if isinstance(value, dict):
        return dict, tuple((_frozen(k), _frozen(v)) for k, v in value.items())
    if isinstance(value, list):
        return list, tuple(_frozen(v) for v in value)
    if isinstance(value, float):
        return float, repr(value)
    if value is None or type(value) in (str, int, bool):
        return type(value), value
    raise TypeError(f"{type(value).__name__} is not remembered")


def _plain(value: Any) -> bool:
    """A string OmegaConf passes through as it is (no interpolation, not its MISSING mark)."""
    return isinstance(value, str) and "$" not in value and value != "???"


def _settings_key(data: Any, registry: Registry) -> Any:
    """What parse_run_config's answer depends on besides run_id and results_dir, where those two are strings it
    takes as they are (they are then checked alone, in the order parse_run_config checks them, after every other
    setting); None where that does not hold, or the data has no hashable image (recursive, a date...)."""
    if not isinstance(data, dict) or not _plain(data.get("results_dir")) \
            or not ((data.get("run_id") is None and "run_id" in data) or _plain(data.get("run_id"))):
        return None
    try:
        settings = tuple((_frozen(k), _OWN if k in _OWN else _frozen(v)) for k, v in data.items())
    except (TypeError, RecursionError):
        return None
    backends = tuple((w, tuple(b)) for w, b in registry.backends_by_workload().items())
    return settings, backends


def _parsed_run(data: Any, registry: Registry) -> _Config:
    """parse_run_config(data)'s RunConfig (or its ConfigError), parsed once per distinct settings."""
    from xmfu.harness.config.run_settings import parse_results_dir, parse_run_config, parse_run_id

    key = _settings_key(data, registry)
    known = _RUNS.get(key) if key is not None else None
    if known is None:
        cfg = parse_run_config(data, registry.backends_by_workload())
        if key is not None:
            _RUNS[key] = _Run(cfg)
            while len(_RUNS) > CACHED_CONFIGS:
                _RUNS.popitem(last=False)
        return _Config(cfg, key)
    _RUNS.move_to_end(key)
    own = {"results_dir": parse_results_dir(data["results_dir"]), "run_id": parse_run_id(data["run_id"])}
    return _Config(dataclasses.replace(known.cfg, **own), key)


@lru_cache(maxsize=8)  # the same bundle read again (a report and its checks); _Config is frozen
def _config(config_text: str) -> _Config | str:
    """The run's config as `xmfu run` parsed it from this config.yaml (RunConfig), or why it cannot be."""
    from xmfu.harness.api import replanned
    from xmfu.harness.config.run_settings import parse_run_config

    try:
        data = config_data(config_text)  # parsed once per text (libyaml), a copy of our own
        benchmark = replanned(data)
        if benchmark is not None:  # xmfu.benchmark's bundle: its own case and candidates, planned each time
            registry, settings = benchmark
            return _Config(parse_run_config(settings, registry.backends_by_workload()), None, registry)
        registry = _registry()
        if isinstance(data, dict):
            placeholder(registry, data)  # a plug-in the run named need not be installed where it is read
        return _parsed_run(data, registry)
    except (ConfigError, yaml.YAMLError, TypeError, ValueError, KeyError) as exc:
        return f"config.yaml is not a config this xmfu plans ({type(exc).__name__}: {exc})"[:300]


def _device_key(devices: list[dict[str, Any]]) -> Any:
    """The planned-for device's record, hashable (DeviceInfo is made from it alone)."""
    try:
        entry = _device_entry(devices)
        return None if entry is None else _frozen(entry)
    except (TypeError, RecursionError):
        return _UNREMEMBERED


_UNREMEMBERED = object()  # a device with no hashable image: planned each time


def _plan(cfg: Any, device: DeviceInfo | None,
          registry: Registry | None = None) -> tuple[dict[tuple[str, str], Any], dict[str, Any], dict] | str:
    from xmfu.harness.run import plan_phases

    try:
        phases = plan_phases(cfg, registry or _registry(), device)
    except (ConfigError, TypeError, ValueError, KeyError) as exc:
        return f"config.yaml is not a config this xmfu plans ({type(exc).__name__}: {exc})"[:300]
    return ({(p.name, c.case_id): c for p in phases for c in p.cases}, {p.name: cfg.protocol(p.name) for p in phases},
            {})  # the planned cases' own figures, filled as rows ask (`_case_figures`)


def _cases(config_text: str, devices: list[dict[str, Any]]) -> tuple[dict[tuple[str, str], Any], Any,
                                                                     dict[str, Any], dict] | str:
    """(phase, case id) -> the case, as the run planned it from this config; the config; phase -> the config's
    timing protocol (the mamf sweep's follows mamf.method, parsed from config.yaml: no suite tag); the planned cases'
    own figures, as far as rows have asked for them; or why it cannot be planned. Planned once per distinct settings
    and device (the cases do not depend on run_id or results_dir)."""
    parsed = _config(config_text)
    if isinstance(parsed, str):
        return parsed
    run = _RUNS.get(parsed.key) if parsed.key is not None else None
    where = _device_key(devices)
    planned = run.plans.get(where) if run is not None and where is not _UNREMEMBERED else None
    if planned is None:
        planned = _plan(parsed.cfg, _device(devices), parsed.registry)
        if run is not None and where is not _UNREMEMBERED:
            run.plans[where] = planned
    if isinstance(planned, str):
        return planned
    cases, protocols, figures = planned
    return cases, parsed.cfg, protocols, figures


def _settled(case: Any, params: dict[str, Any]) -> Any:
    """The case as the backend ran it: a field the expanded case left open (None, e.g. a distributed step's world
    size) takes the row's value, as Prepared.case settles it in the run."""
    if not dataclasses.is_dataclass(case) or not isinstance(params, dict):
        return case
    names = _field_names(type(case))
    settled = {k: v for k, v in params.items() if v is not None and k in names and getattr(case, k) is None}
    return dataclasses.replace(case, **settled) if settled else case


@lru_cache(maxsize=64)
def _field_names(kind: type) -> frozenset[str]:
    """A case class's fields (dataclasses.fields: no ClassVar), looked up once per class."""
    return frozenset(f.name for f in dataclasses.fields(kind))


def _at_time(case: Any, row: dict[str, Any]) -> dict[str, Any]:
    """The figures the case's formulas fix at the row's median time (the runner's `_extras`)."""
    t = row.get("time_s")
    median = t.get("median") if isinstance(t, dict) else None
    out: dict[str, Any] = {}
    if not median:
        return out
    bandwidth = getattr(case, "bandwidth", None)
    if bandwidth:
        out.update(bandwidth(median, (row.get("notes") or {}).get("ranks")))
    units = getattr(case, "work_units", None)
    if units:
        out["throughput"] = {f"{name}_per_s": count / median for name, count in units().items()}
    return out


def _protocol(timing: dict[str, Any], row: dict[str, Any]) -> dict[str, Any] | None:
    """The protocol the runner keys this row with (harness/engine/runner.py `_protocol`): the config's timing
    protocol, `cuda_graph` named only where the row's timer says graphs were replayed (a row without a timer, not
    timed, is taken at its word there), and a suite's tag as the row states it (config.yaml does not hold it:
    rederive_run.suite_problems checks it against the manifest's suite). None: the row holds no comparability fields."""
    fields = row.get("comparability")
    if not isinstance(fields, dict) or not isinstance(fields.get("protocol"), dict):
        return None
    stated, out = fields["protocol"], dict(timing)
    timer = row.get("timer")
    if out.get("cuda_graph"):
        replayed = timer.get("cuda_graph") is True if isinstance(timer, dict) else "cuda_graph" in stated
        if not replayed:
            del out["cuda_graph"]
    if "suite" in stated:
        out["suite"] = stated["suite"]
    return out


def _own_figures(case: Any, row: dict[str, Any], rec: dict[str, Any] | None, cfg: Any,
                 devices: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures a workload derives from the row's raw samples through its `figures` hook, called as the runner's
    `_case_figures` calls it (inference: weights and KV-cache bytes, TTFT/TPOT percentiles, MBU against the peak
    memory bandwidth of the recorded device, or config.yaml's peak_membw_gbps)."""
    figures = getattr(case, "figures", None)
    if figures is None or row.get("status") != "ok" or not isinstance(rec, dict):
        return {}
    from xmfu.harness.machine.peaks import lookup_membw

    device = _device([d for d in devices if d.get("index") == row.get("device_index", 0)] or devices)
    if device is None:
        return {}  # no recorded device: the peak cannot be looked up (the peak check says why)
    valid = row.get("timing_valid") is True
    values, repeats = rec.get("samples") or [], rec.get("repeats") or []
    per_repeat: dict[Any, list[float]] = {}  # the runner's `_per_repeat`: each repeat's samples, in order
    for value, r in zip(values, repeats if len(repeats) == len(values) else [0] * len(values), strict=True):
        per_repeat.setdefault(r, []).append(value)
    samples = [per_repeat[r] for r in sorted(per_repeat)] if valid else []
    membw = lookup_membw(device, override=cfg.peak_membw_gbps)
    return figures(row.get("time_s"), samples, membw, None if valid else row.get("timing_note"))


def _case_figures(case: Any) -> dict[str, Any]:
    """What the case's formulas give whatever the row: its params, FLOPs, convention, bytes and roofline work. A
    planned case's are computed once per process and shared by its rows (every backend's, every bundle's of these
    settings), read, never changed."""
    work = Work.of(case)
    return {"params": case.params(), "flops": case.flops(), "flop_convention": case.flop_convention,
            "bytes": case.bytes_moved(),
            ROOFLINE_WORK: {"floor_flops": work.floor_flops, "off_roofline": work.off_roofline}}


def _figures(case: Any, row: dict[str, Any], timing: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """The case's own figures (`fixed`, from _case_figures) and those the row's protocol, status and time give."""
    out = dict(fixed)
    protocol = _protocol(timing, row)
    if protocol is not None:  # the case parts are the row's own (rederive.key_problems checks them against it)
        out["comparability"] = {**row["comparability"], "protocol": protocol}
    hardware = getattr(case, "hardware_flops", None)
    if hardware is not None and row.get("status") == "ok":
        out["hardware_flops"] = hardware()
    if row.get("status") == "ok":
        out.update(_at_time(case, row))
    restate = getattr(case, "restate", None)  # a workload's own formula figures (e.g. communication bytes)
    if restate is not None and row.get("status") == "ok":
        out.update(restate(row))
    return out


def restate_rows(config_text: str, devices: list[dict[str, Any]], rows: list[dict[str, Any]],
                 samples: list[dict[str, Any]] | None = None) -> list[Restated]:
    """The validator's `Formulas`: for each row, what its workload's formulas give (rederive.Restated);
    `samples`: the rows' samples records, line by line (for the figures a workload derives from them)."""
    planned = _cases(config_text, devices)
    if isinstance(planned, str):
        return [Restated(unchecked=planned) for _ in rows]
    cases, cfg, protocols, known = planned
    samples = samples or []
    out = []
    for number, row in enumerate(rows):
        key = (row.get("phase") or "main", row.get("case_id"))
        planned_case = cases.get(key)
        if planned_case is None:
            out.append(Restated(problem=f"case {key[1]!r} (phase {key[0]}) is not a case of the bundle's config.yaml"))
            continue
        case = _settled(planned_case, row.get("params"))
        try:
            rec = samples[number] if number < len(samples) else None
            fixed = known.get(key) if case is planned_case else None  # a case the row settled is its own
            if fixed is None:
                fixed = _case_figures(case)
                if case is planned_case:
                    known[key] = fixed
            out.append(Restated(figures={**_figures(case, row, protocols[key[0]], fixed),
                                         **_own_figures(case, row, rec, cfg, devices)}))
        except Exception as exc:  # a formula that cannot take this row's values: not checked, and said
            out.append(Restated(unchecked=f"the formulas could not be applied ({type(exc).__name__}: {exc})"))
    return out


def restate_run(config_text: str, manifest: dict[str, Any]) -> Restated:
    """The validator's `RunFormula`: the manifest's comparability_key as the run makes it (harness/run.py
    `run_key`), from config.yaml and, for a suite's part, the manifest's suite tag (config.yaml does not hold it;
    the rows' tags are checked against the same manifest field)."""
    from xmfu.harness.engine.settings import SuiteTag
    from xmfu.harness.run import run_key

    parsed = _config(config_text)
    if isinstance(parsed, str):
        return Restated(unchecked=f"comparability_key not re-derived: {parsed}")
    cfg = parsed.cfg
    suite = manifest.get("suite")
    if isinstance(suite, dict):  # only name, version and definition_sha join the key (SuiteTag.key)
        tag = {f.name: suite.get(f.name, "") for f in dataclasses.fields(SuiteTag)}
        cfg = dataclasses.replace(cfg, suite=SuiteTag(**tag))
    return Restated(figures={"comparability_key": run_key(cfg)})


def install() -> None:
    """Every bundle this process loads is checked against the workloads' formulas and the run's."""
    from xmfu.harness.results.bundle.validator import use_formulas

    use_formulas(restate_rows, restate_run)
