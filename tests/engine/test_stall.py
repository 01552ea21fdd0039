"""The stall watchdog of multi-process JAX runs (engine/stall.py): a case whose calls stop completing for the
workload's timeout_s is failed and the run ended from a watching thread, since the main thread is stuck in a
collective of XLA's C++ runtime; and a JAX backend's failure there ends the run (attempts.lockstep)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.engine.test_runner import FakeCase, _runner, always
from xmfu.harness.engine import runner as runner_module
from xmfu.harness.engine import stall
from xmfu.harness.engine.case import Prepared, RunAborted
from xmfu.harness.engine.registry import Implementation, WorkloadDef
from xmfu.harness.engine.runner import Phase
from xmfu.harness.results.bundle.reader import read_bundle


def test_no_completed_call_for_the_limit_calls_on_stall_once():
    fired: list[float] = []
    called = threading.Event()

    def on_stall(idle_s: float) -> None:
        fired.append(idle_s)
        called.set()

    with stall.watched(0.3, on_stall):
        assert called.wait(60)  # an event, bounded generously: how soon is benchmarks/bounds.py's figure
        time.sleep(0.7)  # twice the limit again: no second call
    assert len(fired) == 1 and fired[0] >= 0.3


def test_kicks_and_an_inactive_watch_never_fire():
    fired: list[float] = []
    with stall.watched(0.2, fired.append):
        for _ in range(10):  # 0.5 s of calls completing every 0.05 s
            time.sleep(0.05)
            stall.kick()
    with stall.watched(0.2, fired.append, active=lambda: False):  # one process: nothing to watch
        time.sleep(0.4)
    assert fired == []


def _frozen_peer(release: threading.Event):
    """A JAX backend whose call, after the first few, never returns (as a collective whose peer froze)."""
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] > 5:
            release.wait(60)

    def prepare(case, ctx):
        return Prepared(fn, lambda rows: np.full(4, 1.0), "host")
    return prepare


@pytest.mark.slow(seconds=2)
def test_a_stalled_case_fails_its_rows_and_ends_the_run_within_the_limit(tmp_path, monkeypatch):
    """Rank 0 waited in the collective until JAX's heartbeat bound ended it by SIGABRT: no row, no bundle."""
    monkeypatch.setattr(runner_module, "jax_processes_joined", lambda: 2)
    release, ended = threading.Event(), []
    workload = WorkloadDef("fake", lambda *a: [FakeCase(1)],
                           {"jax": Implementation("jax", always, _frozen_peer(release), ("jax",))})
    runner, writer = _runner(tmp_path)
    runner.stall_limit_s = 0.3

    def on_stall(reason):  # the front door's (run.py): finish the bundle, say why, os._exit(1)
        writer.finalize("partial")
        ended.append(reason)
        release.set()  # here the test goes on instead

    runner.on_stall = on_stall
    runner.run_phase(Phase("main", workload, [FakeCase(1)], ["jax"]))
    reason, = ended  # the watchdog, not the frozen call's own 60 s, ended the case
    assert "no call of this case completed" in reason and "timeout_s=0.3" in reason
    bundle = read_bundle(tmp_path / "b")
    assert bundle.manifest["status"] == "partial"
    assert bundle.raw_rows[0]["status"] == "failed" and bundle.raw_rows[0]["reason"] == f"run aborted: {reason}"


def test_a_jax_backend_failing_in_a_multi_process_run_ends_it(tmp_path, monkeypatch):
    """A killed peer makes gloo fail every later collective at once: the run went on failing case after case."""
    monkeypatch.setattr(runner_module, "jax_processes_joined", lambda: 2)

    def prepare(case, ctx):
        def fn():
            raise RuntimeError("UNKNOWN: Gloo all-reduce failed: Connection closed by peer")
        return Prepared(fn, lambda rows: np.full(4, 1.0), "host")

    workload = WorkloadDef("fake", lambda *a: [FakeCase(1)],
                           {"jax": Implementation("jax", always, prepare, ("jax",))})
    runner, _ = _runner(tmp_path)
    runner.stall_limit_s, runner.on_stall = 30.0, lambda reason: None
    with pytest.raises(RunAborted, match=r"jax failed in a multi-process JAX run: .*Connection closed by peer"):
        runner.run_phase(Phase("main", workload, [FakeCase(1), FakeCase(2)], ["jax"]))
