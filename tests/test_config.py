"""The schema's errors, and every config group composing into a valid run config."""

from __future__ import annotations

import pytest

from tests.conftest import run_config
from xmfu.harness.config.hydra_app import UsageError, compose_job, config_groups, validate_job
from xmfu.harness.config.run_settings import explicit_keys, parse_run_config
from xmfu.harness.engine.declare import ConfigError
from xmfu.workloads.catalog import build_registry


@pytest.mark.parametrize(("overrides", "field"), [
    ({"dtype": "fp64"}, "dtype"),
    ({"backends": ["cuda"]}, "backends[0]"),
    ({"backends": []}, "backends"),
    ({"backends": ["torch", "torch"]}, "backends"),
    ({"seed": -1}, "seed"),
    ({"peak_tflops": 0}, "peak_tflops"),
    ({"peak_membw_gbps": -1}, "peak_membw_gbps"),
    ({"device": "tpu"}, "device"),
    ({"timing": {"max_time_s": -1}}, "timing.max_time_s"),
    ({"timing": {"min_samples": 1.5}}, "timing.min_samples"),
    ({"timing": {"colder_cache": True}}, "timing.colder_cache"),
    ({"timing": {"flush_l2": True, "cuda_graph": True}}, "timing.cuda_graph"),  # the flush would not run
    ({"workload": {"name": "fft"}}, "workload"),
    ({"mamf": {"enabled": True, "m": []}}, "mamf"),  # enabled, but one dimension has no size
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
    return [(group, option) for group, options in sorted(config_groups().items()) for option in options]


def test_config_groups_are_only_what_a_user_chooses():
    assert set(config_groups()) == {"workload", "timing", "model", "experiment", "hydra"}


@pytest.mark.parametrize(("group", "option"), _all_group_options())
@pytest.mark.parametrize("scale", ["full", "smoke"])
def test_every_config_group_option_composes_and_validates(group, option, scale):
    if group == "hydra":
        pytest.skip("Hydra's own groups (the Slurm launcher) are composed in tests/e2e")
    cfg = validate_job([f"{group}={option}", f"scale={scale}"], build_registry())
    assert cfg.backends and "smoke" not in cfg.workload


def test_smoke_experiment_shrinks_sizes():
    data, _ = compose_job(["experiment=smoke"])
    cfg = parse_run_config(data, build_registry().backends_by_workload())
    assert max(cfg.workload["sizes"]) <= 256 and cfg.workload["shapes"] == [[96, 80, 72]]
    assert data["timing"]["max_time_s"] <= 2


@pytest.mark.parametrize(("workload", "key", "smoke_value"), [
    ("attention", "seq_q", [48]), ("collectives", "sizes", ["1K", "64K"]), ("allreduce", "sizes", ["1K", "64K"]),
    ("inference", "prompt_len", [16]),
])
def test_smoke_sizes_follow_the_chosen_workload(workload, key, smoke_value):
    job = [f"workload={workload}", "experiment=smoke"]
    cfg = validate_job(job, build_registry())
    assert cfg.workload[key] == smoke_value
    full = validate_job([f"workload={workload}"], build_registry())
    assert full.workload[key] != smoke_value


def test_sizes_named_on_the_command_line_win_over_the_smoke_sizes():
    cfg = validate_job(["experiment=smoke", "workload.sizes=[64]"], build_registry())
    assert cfg.workload["sizes"] == [64] and cfg.workload["shapes"] == [[96, 80, 72]]


def test_explicit_keys():
    assert explicit_keys(["workload.sizes=[1]", "+workload.x=2", "dtype=bf16", "workload=matmul", "mamf.m=[8]",
                          "model.seq_len=16", "model=1b", "hydra.run.dir=x"]) == {
        "workload.sizes", "workload.x", "mamf.m", "model.seq_len"}


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


@pytest.mark.parametrize(("override", "message"), [
    ("timing.max_inner=2.5", "timing.max_inner: 2.5 is not an integer. Allowed: an integer > 0"),
    ("workload.sizes=[a]", "workload.sizes[0]: 'a' is not an integer. Allowed: an integer > 0"),
    ("rocm.tunableop_max_tuning_ms=soon", "rocm.tunableop_max_tuning_ms: 'soon' is not an integer. Allowed: an "
                                          "integer > 0, or null"),
    ("mamf.enabled=perhaps", "mamf.enabled: 'perhaps' is not a boolean. Allowed: true or false"),
])
def test_a_value_omegaconf_refuses_while_composing_is_one_paragraph(override, message):
    """The structured configs type-check while Hydra composes; the error names the field and what its declaration
    allows, as the checks after composing do."""
    with pytest.raises(UsageError) as err:
        compose_job([override])
    assert str(err.value) == f"invalid configuration: {message}"


def test_a_second_experiment_that_would_replace_the_first_is_refused():
    registry = build_registry()
    for job in (["experiment=mamf", "experiment=smoke"], ["experiment=attention-shootout", "experiment=smoke"]):
        with pytest.raises(UsageError, match=r"experiment is chosen 2 times .*keep only the last, experiment=smoke"):
            validate_job(job, registry)
    validate_job(["experiment=smoke", "workload=matmul"], registry)  # one experiment: accepted


def test_libyaml_reads_every_packaged_config_as_the_pure_loader_does():
    """run_settings reads configs/<group>/<option>.yaml with libyaml's loader where PyYAML has one: every packaged
    file gives the same data, value for value and type for type, as yaml.safe_load."""
    import yaml

    from xmfu.harness.config import run_settings

    files = sorted(run_settings.CONFIG_DIR.rglob("*.yaml"))
    assert len(files) > 10
    for path in files:
        text = path.read_text()
        assert repr(yaml.load(text, Loader=run_settings._LOADER)) == repr(yaml.safe_load(text)), path


DECLARED_SECTIONS = [
    ("xmfu.harness.config.run_settings", "RunSettings"), ("xmfu.harness.config.suite_spec", "SuiteSettings"),
    ("xmfu.workloads.collectives.spec", "SizeSweep"), ("xmfu.workloads.collectives.spec", "CollectivesSettings"),
    ("xmfu.workloads.attention.spec", "AttentionSettings"), ("xmfu.workloads.membw.spec", "MembwSettings"),
    ("xmfu.workloads.inference.spec", "InferenceSettings"), ("xmfu.workloads.transformer.spec", "ModelSpec"),
    ("xmfu.workloads.transformer.spec", "TransformerSettings"), ("xmfu.workloads.matmul.spec", "MatmulSettings"),
    ("xmfu.workloads.grouped_matmul.spec", "GroupedMatmulSettings"),
]


def test_every_section_parse_section_is_handed_is_checked_below():
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    handed = {m.group(1) for folder in ("harness", "workloads") for path in (root / folder).rglob("*.py")
              for m in re.finditer(r"parse_section\([^,]+, (\w+),", path.read_text())}
    assert handed - {"cls"} == {name for _, name in DECLARED_SECTIONS}


@pytest.mark.parametrize(("module", "name"), DECLARED_SECTIONS)
def test_the_plain_paths_defaults_are_omegaconfs(module, name):
    """engine/structured._defaults reads a section's defaults from its declaration (no OmegaConf at start-up): for
    every section parse_section is handed, exactly what OmegaConf holds for its schema, value and type."""
    import importlib

    from omegaconf import OmegaConf

    from xmfu.harness.engine import structured

    cls = getattr(importlib.import_module(module), name)
    want = OmegaConf.to_container(OmegaConf.structured(structured.schema_of(cls)), resolve=False)
    assert repr(structured._defaults(cls)) == repr(want)
