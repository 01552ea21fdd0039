"""The workloads' formulas, handed to the validator: what a bundle's rows must state for their params.

harness/results may not import a workload (tests/test_layout.py), so the front door, which may, turns a bundle's
config.yaml back into the cases the run measured, with the run's own planning (harness/run.py `plan_phases`:
the config parsed as `xmfu run` parses it, the mamf sweep and the main workload, fitted to the device
environment.json records), and gives the validator each row's params, FLOPs, bytes and the figures the workload's
formulas fix at the row's median time (bandwidth, work units, hardware FLOPs, communication bytes), and the timing
protocol its comparability fields must name (the config's, as the runner's `_protocol` keys each row), the figures
a workload derives from the row's raw samples (its `figures` hook: inference latencies and MBU), and the manifest's
comparability_key (harness/run.py `run_key`). One definition serves the run and `xmfu validate`.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

import yaml

from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.plugins import placeholder
from xmfu.harness.engine.registry import Registry
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.results.rederive.times import Restated


@lru_cache(maxsize=1)
def _registry() -> Registry:
    from xmfu.workloads.catalog import build_registry

    return build_registry()


def _device(devices: list[dict[str, Any]]) -> DeviceInfo | None:
    known = {f.name for f in dataclasses.fields(DeviceInfo)}
    for d in devices:
        if {"kind", "name", "vendor"} <= set(d):
            return DeviceInfo(**{k: v for k, v in d.items() if k in known})
    return None


@lru_cache(maxsize=8)  # a store's bundles share few configs; RunConfig is frozen
def _config(config_text: str) -> Any:
    """The run's config as `xmfu run` parsed it from this config.yaml (RunConfig), or why it cannot be."""
    from xmfu.harness.config.run_settings import parse_run_config

    try:
        data = yaml.safe_load(config_text)
        registry = _registry()
        if isinstance(data, dict):
            placeholder(registry, data)  # a plug-in the run named need not be installed where it is read
        return parse_run_config(data, registry.backends_by_workload())
    except (ConfigError, yaml.YAMLError, TypeError, ValueError, KeyError) as exc:
        return f"config.yaml is not a config this xmfu plans ({type(exc).__name__}: {exc})"[:300]


def _cases(config_text: str, devices: list[dict[str, Any]]) -> tuple[dict[tuple[str, str], Any], Any,
                                                                     dict[str, Any]] | str:
    """(phase, case id) -> the case, as the run planned it from this config; the config; phase -> the config's
    timing protocol (the mamf sweep's follows mamf.method, parsed from config.yaml: no suite tag); or why it cannot
    be planned."""
    from xmfu.harness.run import plan_phases

    cfg = _config(config_text)
    if isinstance(cfg, str):
        return cfg
    try:
        phases = plan_phases(cfg, _registry(), _device(devices))
    except (ConfigError, TypeError, ValueError, KeyError) as exc:
        return f"config.yaml is not a config this xmfu plans ({type(exc).__name__}: {exc})"[:300]
    return {(p.name, c.case_id): c for p in phases for c in p.cases}, cfg, {p.name: cfg.protocol(p.name)
                                                                           for p in phases}


def _settled(case: Any, params: dict[str, Any]) -> Any:
    """The case as the backend ran it: a field the expanded case left open (None, e.g. a distributed step's world
    size) takes the row's value, as Prepared.case settles it in the run."""
    if not dataclasses.is_dataclass(case) or not isinstance(params, dict):
        return case
    open_fields = {f.name for f in dataclasses.fields(case) if getattr(case, f.name) is None}
    settled = {k: v for k, v in params.items() if k in open_fields and v is not None}
    return dataclasses.replace(case, **settled) if settled else case


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


def _figures(case: Any, row: dict[str, Any], timing: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"params": case.params(), "flops": case.flops(), "flop_convention": case.flop_convention,
                           "bytes": case.bytes_moved()}
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
    cases, cfg, protocols = planned
    samples = samples or []
    out = []
    for number, row in enumerate(rows):
        key = (row.get("phase") or "main", row.get("case_id"))
        case = cases.get(key)
        if case is None:
            out.append(Restated(problem=f"case {key[1]!r} (phase {key[0]}) is not a case of the bundle's config.yaml"))
            continue
        case = _settled(case, row.get("params"))
        try:
            rec = samples[number] if number < len(samples) else None
            out.append(Restated(figures={**_figures(case, row, protocols[key[0]]),
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

    cfg = _config(config_text)
    if isinstance(cfg, str):
        return Restated(unchecked=f"comparability_key not re-derived: {cfg}")
    suite = manifest.get("suite")
    if isinstance(suite, dict):  # only name, version and definition_sha join the key (SuiteTag.key)
        tag = {f.name: suite.get(f.name, "") for f in dataclasses.fields(SuiteTag)}
        cfg = dataclasses.replace(cfg, suite=SuiteTag(**tag))
    return Restated(figures={"comparability_key": run_key(cfg)})


def install() -> None:
    """Every bundle this process loads is checked against the workloads' formulas and the run's."""
    from xmfu.harness.results.bundle.validator import use_formulas

    use_formulas(restate_rows, restate_run)
