"""The workloads' formulas, handed to the validator: what a bundle's rows must state for their params.

harness/results may not import a workload (tests/test_layout.py), so the front door, which may, turns a bundle's
config.yaml back into the cases the run measured, with the run's own planning (harness/run.py `plan_phases`:
the config parsed as `xmfu run` parses it, the mamf sweep and the main workload, fitted to the device
environment.json records), and gives the validator each row's params, FLOPs, bytes and the figures the workload's
formulas fix at the row's median time (bandwidth, work units, hardware FLOPs, communication bytes), and the timing
protocol its comparability fields must name (the config's, as the runner's `_protocol` keys each row). One
definition serves the run and `xmfu validate`.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

import yaml

from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.registry import Registry
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.results.rederive import Restated


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


def _cases(config_text: str, devices: list[dict[str, Any]]) -> tuple[dict[tuple[str, str], Any], dict[str, Any]] | str:
    """(phase, case id) -> the case, as the run planned it from this config, and phase -> the config's timing
    protocol (the mamf sweep's follows mamf.method); or why it cannot be planned."""
    from xmfu.harness.config import parse_run_config
    from xmfu.harness.run import plan_phases

    try:
        data = yaml.safe_load(config_text)
        registry = _registry()
        cfg = parse_run_config(data, registry.backends_by_workload())
        phases = plan_phases(cfg, registry, _device(devices))
    except (ConfigError, yaml.YAMLError, TypeError, ValueError, KeyError) as exc:
        return f"config.yaml is not a config this xmfu plans ({type(exc).__name__}: {exc})"[:300]
    cases = {(p.name, c.case_id): c for p in phases for c in p.cases}
    return cases, {p.name: cfg.protocol(p.name) for p in phases}  # parsed from config.yaml: no suite tag


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
    timed, is taken at its word there), and a suite's tag as the row states it (config.yaml does not hold it; the
    suite's definition hash is checked where suites are). None: the row holds no comparability fields."""
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


def restate_rows(config_text: str, devices: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[Restated]:
    """The validator's `Formulas`: for each row, what its workload's formulas give (rederive.Restated)."""
    planned = _cases(config_text, devices)
    if isinstance(planned, str):
        return [Restated(unchecked=planned) for _ in rows]
    cases, protocols = planned
    out = []
    for row in rows:
        key = (row.get("phase") or "main", row.get("case_id"))
        case = cases.get(key)
        if case is None:
            out.append(Restated(problem=f"case {key[1]!r} (phase {key[0]}) is not a case of the bundle's config.yaml"))
            continue
        case = _settled(case, row.get("params"))
        try:
            out.append(Restated(figures=_figures(case, row, protocols[key[0]])))
        except Exception as exc:  # a formula that cannot take this row's values: not checked, and said
            out.append(Restated(unchecked=f"the formulas could not be applied ({type(exc).__name__}: {exc})"))
    return out


def install() -> None:
    """Every bundle this process loads is checked against the workloads' formulas."""
    from xmfu.harness.results.validator import use_formulas

    use_formulas(restate_rows)
