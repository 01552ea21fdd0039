"""scale=smoke (harness/config/run_settings.py): one switch that shrinks every experiment, suite, sweep and model
preset, and says so. Checked on the resolved plans (nothing is run here; tests/e2e/test_cli.py runs experiment=mamf
scale=smoke)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xmfu.harness.config.hydra_app import compose_job, config_groups, validate_job
from xmfu.harness.config.suite_spec import parse_suite, shared_overrides
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.machine.ranks import ProcessInfo
from xmfu.harness.run import _manifest, plan_phases
from xmfu.harness.suites import suite
from xmfu.workloads.catalog import build_registry

MAX_FLOPS = 1e9  # per case: a 512^3 matmul is 2.7e8; experiment=mamf's 4096^3 alone is 1.4e11
MAX_BYTES = 64 * 2**20
MAX_CASES = 64
SINGLE = ProcessInfo(rank=0, world_size=1, local_rank=0, launcher="single")
SUITES = ("acceptance", "nightly")


def _bounded(cfg, registry, what):
    cases = [c for phase in plan_phases(cfg, registry) for c in phase.cases]
    assert 0 < len(cases) <= MAX_CASES, what
    for case in cases:
        assert case.flops() <= MAX_FLOPS and case.bytes_moved() <= MAX_BYTES, f"{what}: {case.case_id}"


@pytest.mark.parametrize("experiment", sorted(set(config_groups()["experiment"]) - set(SUITES)))
def test_every_experiment_is_bounded_at_smoke_scale(experiment):
    registry = build_registry()
    cfg = validate_job([f"experiment={experiment}", "scale=smoke"], registry)
    _bounded(cfg, registry, experiment)
    assert cfg.scale == "smoke"


def test_the_mamf_sweep_shrinks_and_says_so():
    registry = build_registry()
    cfg = validate_job(["experiment=mamf", "scale=smoke"], registry)
    (mamf, _) = plan_phases(cfg, registry)
    assert len(mamf.cases) == 8 and max(max(c.params()["m"], c.params()["n"], c.params()["k"])
                                        for c in mamf.cases) == 512
    assert "mamf sweep at smoke sizes" in cfg.scale_notes["mamf"][0]
    full = validate_job(["experiment=mamf"], registry)
    assert max(full.mamf.m) == 16384 and full.scale_notes == {}
    # sizes named on the command line win, as the workload's do
    assert validate_job(["experiment=mamf", "scale=smoke", "mamf.m=[64]"], registry).mamf.m == (64,)


@pytest.mark.parametrize("workload", ["transformer", "inference"])
@pytest.mark.parametrize("preset", config_groups()["model"])
def test_every_model_preset_runs_the_tiny_shapes_and_names_the_preset(workload, preset):
    """A mixture-of-experts preset shrinks to moe-tiny (it stays a mixture of experts); inference refuses one."""
    registry = build_registry()
    tiny = "moe-tiny" if preset.startswith(("moe-", "mixtral", "deepseek")) else "tiny"
    if workload == "inference" and tiny == "moe-tiny":
        with pytest.raises(ConfigError, match="mixture of experts"):
            _bounded(validate_job([f"workload={workload}", f"model={preset}", "scale=smoke"], registry), registry,
                     preset)
        return
    cfg = validate_job([f"workload={workload}", f"model={preset}", "scale=smoke"], registry)
    _bounded(cfg, registry, f"{workload} {preset}")
    assert cfg.workload["model"]["name"] == tiny
    if preset != tiny:
        (note,) = [n for n in cfg.scale_notes["main"] if "model preset" in n]
        assert f"model preset {preset} replaced by the {tiny} preset" in note
        assert f"not the {preset} preset's figures" in note
        manifest = _manifest(cfg, "r", [], [])
        assert note in manifest["scale"]["notes"]["main"]


def test_experiment_smoke_does_not_lose_to_a_model_named_on_the_command_line():
    cfg = validate_job(["workload=transformer", "model=1b", "experiment=smoke"], build_registry())
    assert cfg.workload["model"]["d_model"] == 64  # was 2048: the 1.5B model, out of memory on a 24 GiB host


def test_model_settings_named_on_the_command_line_keep_their_values():
    cfg = validate_job(["workload=transformer", "model=1b", "model.seq_len=16", "scale=smoke"], build_registry())
    assert cfg.workload["model"]["seq_len"] == 16 and cfg.workload["model"]["d_model"] == 64


@pytest.mark.parametrize("experiment", SUITES)
def test_every_suite_part_is_bounded_under_scale_smoke_even_with_an_accelerator(experiment, tmp_path):
    registry = build_registry()
    overrides = [f"experiment={experiment}", "scale=smoke"]
    data, _ = compose_job(overrides)
    spec = suite.with_run_scale(parse_suite(data["suite"]), data["scale"])
    gpu = replace(suite.detect("cpu"), kind="cuda")  # auto alone would pick full sizes here
    settings = suite.Settings(results_dir=str(tmp_path), run_id="s", device="cpu", price=None, store=None)
    plan = suite.plan(spec, settings, shared_overrides(overrides), registry, gpu, SINGLE, {})
    assert plan.smoke and "scale=smoke" in plan.scale_reason
    for name, jobs in plan.jobs.items():
        for job in jobs:
            _bounded(job.cfg, registry, f"{experiment} {name}")


def test_scale_smoke_and_suite_scale_full_contradict():
    data, _ = compose_job(["experiment=acceptance", "suite.scale=full", "scale=smoke"])
    with pytest.raises(Exception, match="opposite sizes"):
        suite.with_run_scale(parse_suite(data["suite"]), data["scale"])


def test_full_scale_manifests_and_configs_are_unchanged():
    cfg = validate_job(["workload=matmul"], build_registry())
    assert cfg.scale == "full" and "scale" not in _manifest(cfg, "r", [], [])
