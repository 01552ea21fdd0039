"""Every setting is declared once (harness/engine/declare.py): the YAML under configs/ states only what differs from
a declared default, `xmfu run --help` and the other commands read their defaults from the declarations, and every
setting says what it is for."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from xmfu.harness.api import benchmark
from xmfu.harness.cli.compare import _compare_parser
from xmfu.harness.config.hydra_app import CONFIG_DIR, compose_job, config_groups
from xmfu.harness.config.run_help import render, settings_page
from xmfu.harness.config.run_settings import RunSettings
from xmfu.harness.config.suite_spec import PartSettings, SuiteSettings
from xmfu.harness.engine.declare import default_of
from xmfu.harness.engine.settings import TimingConfig
from xmfu.workloads.catalog import build_registry
from xmfu.workloads.transformer.spec import ModelSpec

SKIPPED = ("defaults", "smoke")  # Hydra's defaults list; a workload's smoke block (it resets what an experiment set)


def _workload_settings() -> dict[str, type]:
    registry = build_registry()
    return {name: registry.workload(name).settings for name in registry.backends_by_workload()}


def _same(value: Any, default: Any) -> bool:
    """YAML's value equals the declared default (2 and 2.0 alike; a list and a tuple alike; true is not 1)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return type(value) is type(default) and value == default
    if isinstance(value, (int, float)) and isinstance(default, (int, float)):
        return float(value) == float(default)
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return len(value) == len(default) and all(_same(v, d) for v, d in zip(value, default, strict=True))
    if dataclasses.is_dataclass(default):
        default = dataclasses.asdict(default)
    if isinstance(value, Mapping) and isinstance(default, Mapping):
        return value.keys() == default.keys() and all(_same(value[k], default[k]) for k in value)
    return value == default


def _has_default(field: dataclasses.Field) -> bool:
    return field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING


def repeated_defaults(data: Mapping[str, Any], cls: type, path: str, workload: type | None = None) -> list[str]:
    """The keys of `data` whose value is the default `cls` declares for them, recursively through sections."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    found = []
    for key, value in data.items():
        where = f"{path}.{key}" if path else key
        if key in SKIPPED:
            continue
        assert key in fields, f"{where}: not a declared setting of {cls.__name__}"
        section = workload if key == "workload" else hints[key] if dataclasses.is_dataclass(hints[key]) else None
        inner = typing.get_args(hints[key])[0] if key == "suite" else None
        if section is not None and isinstance(value, Mapping):
            found += repeated_defaults(value, section, where)
        elif inner is SuiteSettings and isinstance(value, Mapping):
            found += repeated_defaults({k: v for k, v in value.items() if k != "parts"}, SuiteSettings, where)
            for name, part in value.get("parts", {}).items():
                found += repeated_defaults(part, PartSettings, f"{where}.parts.{name}")
        elif _has_default(fields[key]) and _same(value, default_of(cls, key)):
            found.append(f"{where}: {value!r}")
    return found


def _yaml_files(group: str) -> list[Any]:
    return sorted((CONFIG_DIR / group).glob("*.yaml"))


def _chosen_workload(data: Mapping[str, Any], fallback: str) -> str:
    """The workload an experiment chooses (`override /workload: NAME`), or the group option's own base."""
    for entry in data.get("defaults") or []:
        if isinstance(entry, Mapping):
            for key, value in entry.items():
                if key.endswith("/workload"):
                    return value
        elif isinstance(entry, str) and entry.startswith("/workload_schema/"):
            return entry.split("/")[2].split("@")[0]
        elif isinstance(entry, str) and entry != "_self_":
            return _chosen_workload(yaml.safe_load((CONFIG_DIR / "workload" / f"{entry}.yaml").read_text()), entry)
    return fallback


def _yaml_cases() -> list[tuple[str, Mapping[str, Any], type, type | None]]:
    """(file, its values, the declaration they are checked against, the workload section's declaration)."""
    settings = _workload_settings()
    cases = [("config.yaml", yaml.safe_load((CONFIG_DIR / "config.yaml").read_text()), RunSettings, None)]
    for path in _yaml_files("timing"):
        cases.append((f"timing/{path.name}", yaml.safe_load(path.read_text()) or {}, TimingConfig, None))
    for path in _yaml_files("model"):
        cases.append((f"model/{path.name}", yaml.safe_load(path.read_text()), ModelSpec, None))
    for path in _yaml_files("workload"):
        data = yaml.safe_load(path.read_text())
        cases.append((f"workload/{path.name}", data, settings[_chosen_workload(data, path.stem)], None))
    for path in _yaml_files("experiment"):
        data = yaml.safe_load(path.read_text())
        cases.append((f"experiment/{path.name}", data, RunSettings, settings[_chosen_workload(data, "matmul")]))
    return cases


@pytest.mark.parametrize(("name", "data", "cls", "workload"), _yaml_cases(), ids=lambda c: c if isinstance(c, str)
                         else "")
def test_no_yaml_value_repeats_a_declared_default(name, data, cls, workload):
    values = {k: v for k, v in data.items() if k != "hydra"}  # Hydra's own settings are Hydra's to declare
    assert repeated_defaults(values, cls, "", workload) == [], f"{name} repeats defaults declared in code"


def test_the_check_finds_a_repeated_default():
    assert repeated_defaults({"dtype": "bf16", "timing": {"max_time_s": 10}}, RunSettings, "") == [
        "dtype: 'bf16'", "timing.max_time_s: 10"]
    assert repeated_defaults({"workload": {"sizes": None}}, RunSettings, "", _workload_settings()["matmul"]) == [
        "workload.sizes: None"]


def _declared(cls: type, prefix: str = "") -> list[tuple[str, type, dataclasses.Field]]:
    """Every setting of `cls`, sections expanded: (dotted key, the declaring class, its field)."""
    out = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        default = default_of(cls, f.name) if _has_default(f) else None
        if dataclasses.is_dataclass(default):
            out += _declared(type(default), key)
        else:
            out.append((key, cls, f))
    return out


ALL_DECLARED = [*_declared(RunSettings), *_declared(ModelSpec, "model"), *_declared(SuiteSettings, "suite"),
                *_declared(PartSettings, "suite.parts.NAME"),
                *[s for cls in _workload_settings().values() for s in _declared(cls, "workload")]]


@pytest.mark.parametrize(("key", "cls", "field"), ALL_DECLARED, ids=[f"{c.__name__}:{k}" for k, c, _ in ALL_DECLARED])
def test_every_setting_says_what_it_is_for(key, cls, field):
    assert field.metadata.get("help"), f"{key} ({cls.__name__}) is declared without a line of help"


def test_run_help_shows_every_default_from_the_declaration():
    settings = _workload_settings()
    page = settings_page(settings, config_groups())
    for key, cls, field in [*_declared(RunSettings), *_declared(ModelSpec, "model"),
                            *[s for c in settings.values() for s in _declared(c, "workload")]]:
        if key in ("workload", "model", "suite"):  # config groups and a suite's definition: listed otherwise
            continue
        shown = render(default_of(cls, field.name)) if _has_default(field) else "<preset>"
        assert f"  {key}={shown} " in page, key


def test_commands_and_the_api_take_their_defaults_from_the_run_settings():
    assert _compare_parser().get_default("margin") == default_of(RunSettings, "equivalence_margin")
    params = inspect.signature(benchmark).parameters
    for name in ("results_dir", "device", "repeats"):
        assert params[name].default == default_of(RunSettings, name)


def test_composing_the_default_options_gives_the_declared_defaults():
    data, _ = compose_job(["timing=default", "workload=transformer", "model=tiny"])
    assert data["timing"] == dataclasses.asdict(TimingConfig())
    assert data["equivalence_margin"] == default_of(RunSettings, "equivalence_margin")
    settings = _workload_settings()["transformer"]
    expected = {f.name: default_of(settings, f.name) for f in dataclasses.fields(settings)}
    assert {**data["workload"], "model": None} == {**expected, "smoke": None}
    assert data["workload"]["model"]["name"] == "tiny"  # ${model}: the preset the model group chose


def test_the_settings_page_of_the_manual_is_generated_and_current(capsys):
    """docs/settings.md is `xmfu run --help`'s settings page: the manual states no default of its own."""
    from xmfu.harness.cli import settings_page

    assert settings_page.main(["--check"]) == 0, capsys.readouterr().out
