"""The engine with a made-up workload: statuses, isolation of failures, never timing a wrong result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from tests.conftest import QUICK_TIMING, run_config
from xmfu.harness.engine.case import Check, FixedPlan, Prepared, RunAborted, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.registry import Implementation, WorkloadDef
from xmfu.harness.engine.runner import CaseRunner, Phase
from xmfu.harness.machine.platform import Platform, cpu_device
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.bundle.writer import BundleWriter


@dataclass(frozen=True)
class FakeCase:
    size: int
    dtype: str = "fp32"
    workload: ClassVar[str] = "fake"
    flop_convention: ClassVar[str] = "fake/1"

    @property
    def case_id(self):
        return f"fake-{self.size}"

    def params(self):
        return {"size": self.size}

    def flops(self):
        # the work of sum(range(100)) (a microsecond), counted as the roofline allows: a count far above it would make
        # the time faster than the roofline (harness/machine/roofline.py) and fail the row
        return 1e3 * self.size

    def bytes_moved(self):
        return 1e3

    def check_rows(self):
        return None

    def check(self, rows):
        error = float(np.abs(rows - 1.0).max())
        return Check(error < 1e-6, error, 1e-6, "max abs", "all")


def _prepared(value):
    return Prepared(lambda: sum(range(100)), lambda rows: np.full(4, value), "host")


def _raise(exc):
    def prepare(case, ctx):
        raise exc
    return prepare


def always(case, ctx):
    return True, ""


IMPLS = {
    "good": Implementation("good", always, lambda c, x: _prepared(1.0)),
    "wrong": Implementation("wrong", always, lambda c, x: _prepared(1.5)),
    "bad": Implementation("bad", always, _raise(RuntimeError("CUDA out of memory. Tried to allocate"))),
    "absent": Implementation("absent", lambda c, x: (False, "library missing"), _raise(AssertionError)),
}
FAKE = WorkloadDef("fake", lambda cfg, dtype, seed: [FakeCase(1), FakeCase(2)], IMPLS)


def _runner(tmp_path, **cfg):
    config = run_config(workload={"name": "fake"}, backends=["good"], **cfg)
    ctx = RunContext(config, Platform("cpu", (cpu_device(),), "test"))
    writer = BundleWriter(tmp_path / "b", {"run_id": "r", "created": "2026-11-23T00:00:00Z", "xmfu_version": "0",
                                           "git_sha": None,
                                           "argv": [], "overrides": [], "comparability_key": "k"}, "", {})
    return CaseRunner(ctx, writer, "r", lambda row: None), writer


def test_statuses_and_isolation(tmp_path):
    runner, writer = _runner(tmp_path)
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good", "wrong", "bad", "absent"]))
    writer.finalize("complete")
    rows = {r["backend"]: r for r in read_bundle(tmp_path / "b").raw_rows}
    assert rows["good"]["status"] == "ok" and rows["good"]["time_s"]["n"] >= 3
    assert rows["good"]["tflops"] == pytest.approx(1e3 / rows["good"]["time_s"]["median"] / 1e12)
    assert rows["good"]["mfu"] == pytest.approx(rows["good"]["tflops"] / rows["good"]["peak_tflops"])
    assert rows["wrong"]["status"] == "incorrect" and rows["wrong"]["time_s"] is None
    assert rows["wrong"]["tflops"] is None and "exceeds tolerance" in rows["wrong"]["reason"]
    assert rows["bad"]["status"] == "failed" and rows["bad"]["reason"].startswith("out of memory")
    assert rows["absent"] == rows["absent"] | {"status": "skipped", "reason": "library missing"}
    assert validate_bundle(tmp_path / "b") == []


def test_unavailable_raised_in_prepare_is_a_skip(tmp_path):
    impl = Implementation("good", always, _raise(Unavailable("needs sm_90")))
    runner, _ = _runner(tmp_path)
    runner.run_phase(Phase("main", WorkloadDef("fake", FAKE.expand, {"good": impl}), [FakeCase(1)], ["good"]))
    assert runner.rows[0]["status"] == "skipped" and runner.rows[0]["reason"] == "needs sm_90"


def test_mamf_phase_sets_achievable_for_later_rows(tmp_path):
    runner, writer = _runner(tmp_path)
    runner.run_phase(Phase("mamf", FAKE, [FakeCase(1), FakeCase(8)], ["good"]))
    best = max(r["tflops"] for r in runner.rows)
    assert runner.achievable["tflops"] == best
    runner.run_phase(Phase("main", FAKE, [FakeCase(2)], ["good"]))
    last = runner.rows[-1]
    assert last["mfu_vs_achievable"] == pytest.approx(last["tflops"] / best)
    assert writer.manifest["achievable"]["tflops"] == best


def test_achievable_from_config(tmp_path):
    runner, _ = _runner(tmp_path, achievable_tflops=2.0)
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good"]))
    assert runner.rows[0]["mfu_vs_achievable"] == pytest.approx(runner.rows[0]["tflops"] / 2.0)


def test_a_backend_whose_timing_means_nothing_is_checked_but_never_called_for_timing(tmp_path):
    def never(*args):
        raise AssertionError("an untimed backend's callable must not run")

    def prepare(case, ctx):
        return Prepared(never, lambda rows: np.full(4, 1.0), "host", timing_valid=False,
                        timing_note="Triton interpreter")

    runner, _ = _runner(tmp_path)
    runner.run_phase(Phase("main", WorkloadDef("fake", FAKE.expand, {"good": Implementation("good", always, prepare)}),
                           [FakeCase(1)], ["good"]))
    row = runner.rows[0]
    assert row["status"] == "ok" and row["correctness"]["ok"] and row["time_s"] is None
    assert row["tflops"] is None and row["mfu"] is None and "timing not valid" in row["mfu_reason"]
    assert row["timer"]["stop"] == "checked, not timed: Triton interpreter"


def test_flush_and_cuda_graph_options_are_recorded_in_the_row(tmp_path):
    """One at a time: together they are refused (tests/test_config.py), a graph replaying calls unflushed."""
    runner, _ = _runner(tmp_path, timing={**QUICK_TIMING, "flush_l2": True})
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good"]))
    timer = runner.rows[0]["timer"]
    assert timer["name"].endswith("after a last-level-cache flush")
    assert timer["flush_l2_bytes"] >= 64 * 2**20 and "cuda_graph" not in timer
    assert timer["host_launch_s"] is None and timer["launch_bound"] is None  # a host timer has no separate launch
    assert runner.rows[0]["comparability"]["protocol"]["flush_l2"] is True
    runner, _ = _runner(tmp_path / "graph", timing={**QUICK_TIMING, "cuda_graph": True})
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good"]))
    assert runner.rows[0]["timer"]["cuda_graph"] == "not applied: host on cpu"


def test_a_jax_only_run_allocates_no_flush_buffer(tmp_path):
    """JAX's timer never flushes, and the GPU flush buffer is a torch tensor: a JAX-only run must not make one."""
    jax_like = Implementation("good", always, lambda c, x: Prepared(lambda: None, lambda rows: np.full(4, 1.0), "jax"))
    runner, _ = _runner(tmp_path, timing={**QUICK_TIMING, "flush_l2": True})
    runner.run_phase(Phase("main", WorkloadDef("fake", FAKE.expand, {"good": jax_like}), [FakeCase(1)], ["good"]))
    assert runner.rows[0]["status"] == "ok" and runner.flush_bytes is None
    assert runner.rows[0]["timer"]["flush_l2_bytes"].startswith("not applied")


def test_rows_carry_the_device_identity(tmp_path):
    from dataclasses import replace

    device = replace(cpu_device(), uuid="5a1b2c03-0001-0203-0405-060708090a0b", pci_bus_id="0000:5d:00.0")
    runner, _ = _runner(tmp_path)
    runner.ctx = RunContext(runner.ctx.config, Platform("cpu", (device,), "test"))
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good"]))
    row = runner.rows[0]
    assert (row["device_uuid"], row["device_pci_bus_id"]) == (device.uuid, device.pci_bus_id)


SEEN: dict = {}  # what the figures hook was given (a hook may return only fields the row declares)


@dataclass(frozen=True)
class FiguresCase(FakeCase):
    def figures(self, time_s, samples, membw, invalid_timing):
        SEEN.update(median=time_s["median"], samples=samples, membw=membw.as_row(), invalid=invalid_timing)
        return {**membw.as_row(), "mbu": None, "mbu_reason": "figures hook ran"}


@dataclass(frozen=True)
class UndeclaredFiguresCase(FakeCase):
    def figures(self, time_s, samples, membw, invalid_timing):
        return {"speed_score": 3.0}


def test_per_event_samples_and_the_figures_hook(tmp_path):
    """calls_per_sample fixes `inner`; before_sample runs once before every timed sample (not for warm-up calls);
    the case's `figures` hook gets each repeat's raw samples, in order, and the peak memory bandwidth."""
    log = []

    def prepare(case, ctx):
        return Prepared(lambda: log.append("call"), lambda rows: np.full(4, 1.0), "host", calls_per_sample=1,
                        before_sample=lambda: log.append("next"))

    runner, _ = _runner(tmp_path, repeats=2, peak_membw_gbps=100.0)
    workload = WorkloadDef("fake", FAKE.expand, {"good": Implementation("good", always, prepare)})
    SEEN.clear()
    runner.run_phase(Phase("main", workload, [FiguresCase(1)], ["good"]))
    row = runner.rows[0]
    assert row["timer"]["inner"] == 1 and "fixed by the backend" in row["timer"]["inner_note"]
    assert row["mbu_reason"] == "figures hook ran"  # what the hook returns joins the row
    seen = SEEN
    assert len(seen["samples"]) == 2 and all(seen["samples"])  # one list per repeat
    assert all(log[i + 1] == "call" for i, entry in enumerate(log) if entry == "next")  # one call per sample
    assert sum(len(r) for r in seen["samples"]) == row["time_s"]["n"] == log.count("next")
    assert log.count("call") > log.count("next")  # the first call and warm-up calls run without the hook
    assert "next" not in log[:2] and seen["median"] == row["time_s"]["median"] and seen["invalid"] is None
    assert seen["membw"]["peak_membw_gbps"] == 100.0 and seen["membw"]["peak_membw_entry"] == "override"


def test_a_row_the_bundle_format_refuses_is_written_as_failed_and_the_sweep_goes_on(tmp_path):
    """A hook that returns a field the row does not declare is xmfu's own defect: that row is written as failed,
    naming the field, the next case still runs, and the bundle stays valid."""
    runner, writer = _runner(tmp_path)
    runner.run_phase(Phase("main", FAKE, [UndeclaredFiguresCase(1), FakeCase(2)], ["good"]))
    writer.finalize("complete")
    first, second = runner.rows
    assert first["status"] == "failed" and "speed_score" in first["reason"] and "xmfu error" in first["reason"]
    assert second["status"] == "ok"
    assert validate_bundle(tmp_path / "b") == []


def _refusing_step(rt):
    """A training step as torch runs it under a graph capture: AdamW(capturable=False).step() raises torch 2.13's
    error (torch/optim/optimizer.py _accelerator_graph_capture_health_check), and a distributed step's wrapper
    (workloads/transformer/torch_parallel.py _aborting) turns any error into RunAborted, ending the run."""
    def step():
        if rt.capturing is not None:
            raise RunAborted("distributed step failed: Attempting CUDA graph capture of step() for an instance of "
                             "AdamW but param_groups' capturable is False.")
        rt.kernel()
    return step


@pytest.mark.parametrize("why", ["", "a training step is not captured"])
def test_a_step_that_cannot_be_captured_is_timed_with_events_and_its_row_says_so(tmp_path, monkeypatch, why):
    """timing.cuda_graph on a GPU: a backend that says why its callable cannot be captured is timed with events,
    its row says `not applied` and its comparability key is a plain run's; one that says nothing is captured, and
    a refused capture there ends the run (what a DDP/FSDP training row did before it said why)."""
    from tests.conftest import gpu_device
    from tests.fakes.torch_cuda_runtime import FakeCudaRuntime
    from xmfu.harness.engine import timers

    rt = FakeCudaRuntime(kernel_s=1e-3)
    monkeypatch.setattr(timers, "_torch", lambda: rt)
    monkeypatch.setattr(timers, "make_torch_device_current", lambda device: None)
    step = Implementation("good", always, lambda c, x: Prepared(
        _refusing_step(rt), lambda rows: np.full(4, 1.0), "torch", fixed=FixedPlan(1, 4, 2), no_cuda_graph=why))
    config = run_config(workload={"name": "fake"}, backends=["good"], timing={**QUICK_TIMING, "cuda_graph": True},
                        telemetry={"enabled": False})
    ctx = RunContext(config, Platform("cuda", (gpu_device("NVIDIA H100 80GB HBM3", 132),), "test"))
    writer = BundleWriter(tmp_path / "b", {"run_id": "r", "created": "now", "xmfu_version": "0", "git_sha": None,
                                           "argv": [], "overrides": [], "comparability_key": "k"}, "", {})
    runner = CaseRunner(ctx, writer, "r", lambda row: None)
    phase = Phase("main", WorkloadDef("fake", FAKE.expand, {"good": step}), [FakeCase(1)], ["good"])
    if not why:
        with pytest.raises(RunAborted):
            runner.run_phase(phase)
        return
    runner.run_phase(phase)
    row = runner.rows[0]
    assert row["status"] == "ok" and row["time_s"]["median"] == pytest.approx(1e-3)
    assert row["timer"]["name"] == "torch.cuda.Event" and row["timer"]["cuda_graph"] == f"not applied: {why}"
    assert "cuda_graph" not in row["comparability"]["protocol"]


def test_a_cpu_row_records_its_threads_and_whether_the_host_was_oversubscribed(tmp_path):
    runner, writer = _runner(tmp_path)
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good"]))
    writer.finalize("complete")
    row = read_bundle(tmp_path / "b").raw_rows[0]
    assert row["threads"]["framework"] == "host" and "omp_wait_policy" in row["threads"]
    assert row["contention"]["oversubscribed"] in (True, False) and row["contention"]["run_queue"]["threads"] >= 1
    assert validate_bundle(tmp_path / "b") == []


def test_a_slow_case_says_which_step_it_is_in_while_it_runs(tmp_path):
    """The issue's 1b model: minutes in prepare and compile with nothing on screen. The display hears each step as it
    begins and its live line counts the step's time while the step runs."""
    import io
    import time

    from xmfu.harness.results.render.progress import Progress

    out, now = io.StringIO(), [0.0]
    progress = Progress(1, stream=out, live=True, tick_s=0.01, clock=lambda: now[0])

    def slow_prepare(case, ctx):
        now[0] += 125  # two minutes building the model, as the display's clock sees it
        deadline = time.monotonic() + 3
        while "fake-1 good: preparing 2:05" not in out.getvalue().replace("\n", "") and time.monotonic() < deadline:
            time.sleep(0.01)
        return _prepared(1.0)

    steps = []
    runner, _ = _runner(tmp_path)
    runner.on_step = lambda *a: (steps.append(a[1:]), progress.step(*a))
    slow = WorkloadDef("fake", FAKE.expand, {"good": Implementation("good", always, slow_prepare)})
    try:
        runner.run_phase(Phase("main", slow, [FakeCase(1)], ["good"]))
    finally:
        progress.close()
    assert "fake-1 good: preparing 2:05" in out.getvalue().replace("\n", "")  # the ticker redrew the line mid-step
    assert steps == [("fake-1", "good", s) for s in ("preparing", "compiling/first call", "checking", "timing")]
    assert [r["status"] for r in runner.rows] == ["ok"]


def test_a_display_that_fails_costs_no_row(tmp_path):
    runner, _ = _runner(tmp_path)

    def broken(*args):
        raise OSError("stderr closed")

    runner.on_step = broken
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good"]))
    assert [r["status"] for r in runner.rows] == ["ok"]


def test_the_mamf_sweep_flushes_the_cache_before_every_call_by_default_as_mamf_finder(tmp_path):
    """stas00's mamf-finder (ml-engineering compute/accelerator/benchmarks/mamf-finder.py, benchmark_mm) runs
    `l2_cache.zero_()` on a 256 MiB buffer before each timed call; its published table anchors "achievable"."""
    runner, writer = _runner(tmp_path)
    runner.run_phase(Phase("mamf", FAKE, [FakeCase(1)], ["good"]))
    sweep = runner.rows[0]
    assert sweep["timer"]["name"].endswith("after a last-level-cache flush") and sweep["timer"]["flush_l2_bytes"]
    assert sweep["achievable_method"] == "flushed" and sweep["comparability"]["protocol"]["flush_l2"] is True
    assert writer.manifest["achievable"]["method"] == "flushed"
    runner.run_phase(Phase("main", FAKE, [FakeCase(2)], ["good"]))
    main = runner.rows[-1]
    assert main["achievable_method"] == "flushed" and main["achievable_tflops"] == sweep["tflops"]
    assert "flush_l2_bytes" not in main["timer"] and "flush_l2" not in main["comparability"]["protocol"]


def test_the_warm_sweep_is_a_named_variant_that_never_compares_with_the_flushed_one(tmp_path):
    runner, writer = _runner(tmp_path, mamf={"method": "warm"})
    runner.run_phase(Phase("mamf", FAKE, [FakeCase(1)], ["good"]))
    warm = runner.rows[0]
    assert warm["achievable_method"] == "warm" and "flush_l2_bytes" not in warm["timer"]
    assert "flush_l2" not in warm["comparability"]["protocol"] and writer.manifest["achievable"]["method"] == "warm"
    flushed, _ = _runner(tmp_path / "f")
    flushed.run_phase(Phase("mamf", FAKE, [FakeCase(1)], ["good"]))
    assert flushed.rows[0]["comparability_key"] != warm["comparability_key"]


def test_a_jax_sweep_cannot_be_flushed_and_says_warm(tmp_path):
    jax_like = Implementation("good", always, lambda c, x: Prepared(lambda: None, lambda rows: np.full(4, 1.0), "jax"))
    runner, _ = _runner(tmp_path)
    runner.run_phase(Phase("mamf", WorkloadDef("fake", FAKE.expand, {"good": jax_like}), [FakeCase(1)], ["good"]))
    assert runner.rows[0]["achievable_method"] == "warm" and runner.flush_bytes is None


def test_an_achievable_peak_from_the_config_says_how_it_was_measured(tmp_path):
    runner, _ = _runner(tmp_path, achievable_tflops=2.0)
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good"]))
    assert runner.rows[0]["achievable_method"] == "not stated"
    runner, _ = _runner(tmp_path / "w", achievable_tflops=2.0, achievable_method="warm")
    runner.run_phase(Phase("main", FAKE, [FakeCase(1)], ["good"]))
    assert runner.rows[0]["achievable_method"] == "warm"


def test_cuda_graphs_give_way_to_the_flushed_sweep_and_the_row_says_why(tmp_path):
    """timing.cuda_graph is for the main phase; timing.flush_l2 with it is refused (tests/test_config.py), but
    the flushed sweep only drops the graph, in words, and keys without it."""
    from tests.conftest import gpu_device

    config = run_config(workload={"name": "fake"}, backends=["good"], timing={**QUICK_TIMING, "cuda_graph": True})
    ctx = RunContext(config, Platform("cuda", (gpu_device("NVIDIA H100 80GB HBM3", 132),), "test"))
    runner = CaseRunner(ctx, None, "r", lambda row: None)
    torch_call = Prepared(lambda: None, lambda rows: None, "torch")
    fields = runner._method_fields(torch_call, Phase("mamf", FAKE, [], ["good"]))
    assert fields["cuda_graph"].startswith("not applied: mamf.method=flushed")
    assert "cuda_graph" not in runner._protocol(torch_call, Phase("mamf", FAKE, [], ["good"]))
    assert runner._method_fields(torch_call, Phase("main", FAKE, [], ["good"]))["cuda_graph"] is True
