"""The schema's errors, and every config group composing into a valid run config."""

from __future__ import annotations

import pytest

from harness.config import ConfigError
from harness.hydra_app import UsageError, compose_job, config_groups, validate_job
from tests.conftest import run_config
from workloads.catalog import build_registry


@pytest.mark.parametrize(("overrides", "field"), [
    ({"dtype": "fp64"}, "dtype"),
    ({"backends": ["cuda"]}, "backends[0]"),
    ({"backends": []}, "backends"),
    ({"backends": ["torch", "torch"]}, "backends"),
    ({"seed": -1}, "seed"),
    ({"peak_tflops": 0}, "peak_tflops"),
    ({"device": "tpu"}, "device"),
    ({"timing": {"max_time_s": -1}}, "timing.max_time_s"),
    ({"timing": {"min_samples": 1.5}}, "timing.min_samples"),
    ({"timing": {"colder_cache": True}}, "timing.colder_cache"),
    ({"workload": {"name": "fft"}}, "workload"),
    ({"mamf": {"enabled": True}}, "mamf"),
    ({"surprise": 1}, "surprise"),
])
def test_invalid_values_name_the_field(overrides, field):
    with pytest.raises(ConfigError) as err:
        run_config(**overrides)
    assert err.value.field == field


def test_error_text_lists_allowed_values():
    with pytest.raises(ConfigError) as err:
        run_config(dtype="fp64")
    assert "fp32" in str(err.value) and "bf16" in str(err.value)


def _all_group_options():
    return [(group, option) for group, options in sorted(config_groups().items())
            for option in options if group not in ("scale", "size")]


@pytest.mark.parametrize(("group", "option"), _all_group_options())
def test_every_config_group_option_composes_and_validates(group, option):
    cfg = validate_job([f"{group}={option}", "size=smoke"], build_registry())
    assert cfg.backends


def test_smoke_experiment_shrinks_sizes():
    data, _ = compose_job(["experiment=smoke"])
    assert max(data["workload"]["sizes"]) <= 256
    assert data["timing"]["max_time_s"] <= 2


@pytest.mark.parametrize(("override", "needle"), [
    ("workload=fft", "unknown workload 'fft'"),
    ("timing=slow", "unknown timing 'slow'"),
    ("nonsense=1", "unknown setting 'nonsense'"),
    ("workload.nonsense=1", "unknown setting 'workload.nonsense'"),
])
def test_composition_errors_become_usage_errors(override, needle):
    with pytest.raises(UsageError) as err:
        compose_job([override])
    assert needle in str(err.value)


@pytest.mark.parametrize(("override", "needle"), [
    ("workload.sizes=[0]", "workload.sizes[0]"),
    ("workload.sizes=[-8]", "workload.sizes[0]"),
    ("workload.shapes=[[1,2]]", "workload.shapes[0]"),
    ("dtype=int8", "dtype"),
])
def test_bad_sizes_are_config_errors(override, needle):
    with pytest.raises(ConfigError) as err:
        validate_job([override], build_registry())
    assert needle in str(err.value)
