"""One `xmfu run` from start to end, in-process: what a run leaves behind for the next job of a sweep."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import QUICK_TIMING
from tests.engine.test_runner import FakeCase, _prepared, always
from xmfu.harness.config.run_settings import parse_run_config
from xmfu.harness.engine.registry import Implementation, Registry, WorkloadDef
from xmfu.harness.machine import frameworks
from xmfu.harness.run import execute


def _registry(**workload) -> Registry:
    """The fake workload (its one case, one backend), with `workload`'s other fields (summarize, derive)."""
    def prepare(case, ctx):
        frameworks.share_device_memory()  # sets XLA_PYTHON_CLIENT_PREALLOCATE, as the JAX backends do
        os.environ["JAX_PLATFORMS"] = "cpu"
        return _prepared(1.0)

    registry = Registry()
    registry.add(WorkloadDef("fake", lambda cfg, dtype, seed: [FakeCase(1)],
                             {"good": Implementation("good", always, prepare)}, **workload))
    return registry


def _run(tmp_path, registry, run_id, **extra):
    data = {"workload": {"name": "fake"}, "backends": ["good"], "dtype": "fp32", "timing": dict(QUICK_TIMING),
            "mamf": {}, "results_dir": str(tmp_path), "run_id": run_id, "device": "cpu", **extra}
    cfg = parse_run_config(data, registry.backends_by_workload())
    return execute(cfg, registry, "", ["test"], [])


def test_variables_a_job_sets_do_not_leak_into_the_next_jobs_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    registry = _registry()
    first = _run(tmp_path, registry, "first")
    assert first.exit_code == 0
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in os.environ and "JAX_PLATFORMS" not in os.environ
    second = _run(tmp_path, registry, "second")
    env = json.loads((second.bundle / "environment.json").read_text())["env"]
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in env and "JAX_PLATFORMS" not in env


def test_triton_stays_interpreted_after_the_environment_was_restored(monkeypatch):
    """triton is imported (interpreted) by this test session; a restored environment must not make the next
    CPU job believe it was imported compiled."""
    import triton  # noqa: F401  (conftest set TRITON_INTERPRET=1 before anything imported it)

    assert frameworks.use_triton_interpreter()
    monkeypatch.delenv("TRITON_INTERPRET")
    assert frameworks.use_triton_interpreter() and os.environ["TRITON_INTERPRET"] == "1"


def test_rows_and_manifest_record_contention_and_drift(tmp_path):
    from xmfu.harness.results.bundle.reader import read_bundle

    outcome = _run(tmp_path, _registry(), "conditions")
    bundle = read_bundle(outcome.bundle)
    record = bundle.raw_rows[0]["contention"]
    assert set(record) >= {"contended", "reason", "busiest_others", "load_avg", "gpu_processes"}
    conditions = bundle.manifest["conditions"]
    assert conditions["load_avg"]["start"] and "contended_rows" in conditions and "drift" in conditions


def test_an_achievable_peak_from_the_config_is_printed_with_its_method(tmp_path, capsys):
    outcome = _run(tmp_path, _registry(), "given", achievable_tflops=2.0, achievable_method="warm")
    assert outcome.exit_code == 0
    assert "divided by achievable_tflops=2 TFLOP/s (from the config; warm back-to-back calls" in capsys.readouterr().out


def test_the_run_closes_its_telemetry_sampler_however_it_ends(tmp_path, monkeypatch):
    """neuron-monitor's and xpu-smi's samplers hold a streaming subprocess: the run closes them at its end, also
    when a case raises past the runner."""
    from xmfu.harness import run as run_module
    from xmfu.harness.machine.telemetry.cpu import CpuSampler

    closed = []

    class Streaming(CpuSampler):
        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(run_module, "open_sampler", lambda plat: Streaming())
    _run(tmp_path, _registry(), "closes")
    assert closed == [True]

    def boom(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setattr(run_module, "_measure", boom)
    with pytest.raises(RuntimeError, match="planted"):
        _run(tmp_path, _registry(), "closes-on-error")
    assert closed == [True, True]


def test_the_end_table_progress_and_summary_read_the_engines_rows_as_records(tmp_path, capsys, monkeypatch):
    """The run's own rows (dicts as the engine made them) reach the progress line and the end table as records; a
    NaN a workload returns is null there, as in the bundle, and stops nothing. A workload's summary still reads
    the main phase's rows as written."""
    from xmfu.harness.results.bundle.reader import read_bundle
    from xmfu.harness.results.render.progress import Progress

    shown, summarized = [], []
    monkeypatch.setattr(Progress, "__call__", lambda self, row: shown.append(row))
    registry = _registry(summarize=lambda rows: summarized.extend(rows) or {"rows": len(rows)},
                         derive=lambda row, earlier: {"hfu": float("nan")})
    outcome = _run(tmp_path, registry, "records")
    out = capsys.readouterr().out
    assert outcome.exit_code == 0 and "fake summary rows: 1" in out and "backend good" in out
    assert [r.backend for r in shown] == ["good"] and shown[0].hfu is None
    assert [r["backend"] for r in summarized] == ["good"]  # as written: a dict
    row = read_bundle(outcome.bundle).rows[0]
    assert row.non_finite_fields == ["hfu"] and row.hfu is None


def test_a_run_whose_every_row_was_skipped_says_why_it_exits_1(tmp_path, capsys):
    """It exited 1 with nothing said (issue 42 item 12)."""
    registry = Registry()
    registry.add(WorkloadDef("fake", lambda cfg, dtype, seed: [FakeCase(1)], {
        "good": Implementation("good", lambda case, ctx: (False, "needs a device this is not"), lambda c, x: None)}))
    outcome = _run(tmp_path, registry, "all-skipped")
    err = capsys.readouterr().err
    assert outcome.exit_code == 1
    assert "xmfu: no row is ok (rows skipped): the notes under the table say why each was not; exit status 1" in err
