"""A row whose own warm-up calls and timed samples disagree past validation's bounds (results/rederive/warmup.py) is
marked contended by its run, with why, and its bundle validates (CI's loaded machine: a genuine torch.compile
prefill's timed median 1.64x faster than its fastest warm-up call, its case not flagged, and `xmfu archive` refused
the run's own bundle). Its speedup draws no verdict; a quiet row beside it keeps its record as the case's."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.conftest import QUICK_TIMING, run_config
from tests.engine.test_runner import FakeCase, always
from xmfu.harness.engine import runner as runner_module
from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.registry import Implementation, WorkloadDef
from xmfu.harness.engine.runner import CaseRunner, Phase
from xmfu.harness.machine.platform import Platform, cpu_device
from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.bundle.writer import BundleWriter

QUIET = {"contended": False, "reason": None, "busiest_others": [], "load_avg": [0.0, 0.0, 0.0]}
# a warm-up call and a timed call of each backend, s ("good": the baseline, steady). Sleeps only ever run long, so
# the warm-up of "ramping" stays past FASTER x its timed calls and "drifting"'s timed calls past SLOWER x its warm-up
# however loaded the machine is (within tens of ms of oversleeping)
SLEEPS = {"good": (0.002, 0.002), "ramping": (0.06, 0.002), "drifting": (0.001, 0.04)}


def _sleeper(warm: float, timed: float):
    def prepare(case, ctx):
        state = {"timed": False}

        def call():
            time.sleep(timed if state["timed"] else warm)

        return Prepared(call, lambda rows: np.full(4, 1.0), "host", calls_per_sample=1,
                        before_sample=lambda: state.update(timed=True))
    return prepare


def _run(tmp_path, monkeypatch, backends: list[str]):
    # the case's own contention check reads this host, which a second test run may load: the row's own warm-up is
    # what is under test, so the case is quiet
    monkeypatch.setattr(runner_module.CaseRunner, "_contention", lambda self, before: dict(QUIET))
    timing = {**QUICK_TIMING, "warmup_min_iters": 5, "min_samples": 6, "max_samples": 6, "round_samples": 3}
    config = run_config(workload={"name": "fake"}, backends=["good"], timing=timing, baseline="good")
    writer = BundleWriter(tmp_path / "b", {"run_id": "r", "created": "2026-12-03T00:00:00Z", "xmfu_version": "0",
                                           "git_sha": None, "argv": [], "overrides": [], "comparability_key": "k"},
                          "", {})
    runner = CaseRunner(RunContext(config, Platform("cpu", (cpu_device(),), "test")), writer, "r", lambda row: None)
    impls = {name: Implementation(name, always, _sleeper(*SLEEPS[name])) for name in backends}
    runner.run_phase(Phase("main", WorkloadDef("fake", lambda *a: [FakeCase(1)], impls), [FakeCase(1)], backends))
    writer.finalize("complete")
    return {r["backend"]: r for r in runner.rows}


@pytest.mark.parametrize(("backend", "side"), [("ramping", "faster than the fastest"), ("drifting", "x the median")])
def test_a_row_past_its_own_warm_up_is_contended_and_its_bundle_validates(tmp_path, monkeypatch, backend, side):
    """Before: the row claimed a quiet case and `xmfu validate` refused the run's own bundle ("samples
    rescaled?")."""
    rows = _run(tmp_path, monkeypatch, ["good", backend])
    own = rows[backend]["contention"]
    assert own["contended"] is True and own["warmup"] in own["reason"] and side in own["warmup"]
    assert "warm-up calls and the timed samples disagree" in own["warmup"] and "timing.warmup_s" in own["warmup"]
    assert rows["good"]["contention"] == QUIET  # the case's record, untouched
    speedup = rows[backend]["speedup"]
    assert speedup["verdict"] == "inconclusive" and speedup["verdict_reason"] == "contended"
    assert validate_bundle(tmp_path / "b") == []


def test_a_row_within_the_bounds_keeps_its_cases_record(tmp_path, monkeypatch):
    rows = _run(tmp_path, monkeypatch, ["good"])
    assert rows["good"]["contention"] == QUIET and "warmup" not in rows["good"]["contention"]
    assert validate_bundle(tmp_path / "b") == []
