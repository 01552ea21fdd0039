"""The timers on a simulated GPU runtime (tests/fakes/torch_cuda_runtime.py) and on the host."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

from tests.fakes.torch_cuda_runtime import FakeCudaRuntime
from xmfu.harness.engine.timers import (
    CudaGraphTimer,
    FlushingTimer,
    HostTimer,
    TorchEventTimer,
    flush_buffer,
    timer_for,
)


def test_event_timer_reports_device_time_and_the_hosts_launch_time(monkeypatch):
    from xmfu.harness.engine import timers

    rt = FakeCudaRuntime(kernel_s=2e-3)
    timer = TorchEventTimer(rt)
    host = iter([10.0, 10.0 + 5 * 4e-5])  # the host clock around the 5 launches: 40 us each
    monkeypatch.setattr(timers, "time", SimpleNamespace(perf_counter=lambda: next(host)))
    assert timer.measure(rt.kernel, 5) == pytest.approx(2e-3)  # the device's time, not the host's
    assert timer.last_host_s == pytest.approx(4e-5)


def test_cuda_graph_timer_captures_once_and_times_replays():
    rt = FakeCudaRuntime(kernel_s=1e-3)
    calls = []

    def work():
        calls.append(1)
        rt.kernel()

    timer = CudaGraphTimer(rt)
    assert timer.measure(work, 4) == pytest.approx(1e-3)
    captured = len(calls)  # 3 warm-up calls on a side stream + 4 captured
    assert captured == 7
    assert timer.measure(work, 4) == pytest.approx(1e-3)
    assert len(calls) == captured  # a replay runs the graph, never the Python callable
    timer.measure(work, 8)
    assert len(calls) == captured + 3 + 8  # another inner count is another graph


def test_flushing_timer_flushes_before_every_call_and_times_only_the_calls():
    rt = FakeCudaRuntime(kernel_s=1e-3)
    flushes = []

    def flush():
        flushes.append(1)
        rt.device_clock += 5e-3  # a flush takes device time too; it must stay outside the figure

    timer = FlushingTimer(flush, torch=rt)
    assert timer.measure(rt.kernel, 3) == pytest.approx(1e-3)
    assert len(flushes) == 3


def test_flushing_on_the_host_excludes_the_flush():
    timer = FlushingTimer(lambda: time.sleep(0.01))
    assert timer.measure(lambda: None, 2) < 0.005


def test_flush_buffer_is_twice_the_last_level_cache():
    flush, size = flush_buffer(48 * 2**20, None)
    assert size == 96 * 2**20
    flush()
    assert flush_buffer(None, None)[1] == 64 * 2**20  # unknown cache: a floor, never nothing


def test_timer_choice():
    assert isinstance(timer_for("torch", "cpu"), HostTimer)
    assert isinstance(timer_for("host", "cpu", cuda_graph=True), HostTimer)  # graphs are for torch on GPUs
    assert isinstance(timer_for("torch", "cpu", flush=lambda: None), FlushingTimer)
    assert timer_for("jax", "cpu", flush=lambda: None).name.startswith("perf_counter+block")


def test_host_timer_is_the_mean_per_call():
    assert HostTimer().measure(lambda: np.zeros(10), 10) < 0.01


def test_a_torch_gpu_timer_makes_the_timed_device_current(monkeypatch):
    """Events, synchronize() and graphs act on torch's current device: the timer for cuda:3 must time cuda:3."""
    import torch

    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert timer_for("torch", "cuda", device="cuda:3").name == "torch.cuda.Event"
    assert timer_for("torch", "rocm", cuda_graph=True, device="cuda:1").name.startswith("torch.cuda.CUDAGraph")
    timer_for("jax", "cuda", device="cuda:2")  # JAX places its own work; torch is not asked
    timer_for("torch", "cpu", device="cpu")
    assert chosen == ["cuda:3", "cuda:1"]


def test_a_flushed_sample_counts_its_flushes_in_its_length():
    """Before: inner was sized on the call alone (5 us -> 200 calls, capped at max_inner), so each sample ran
    max_inner flushes: a 10 ms host flush made one sample of a tiny matmul last a second."""
    from xmfu.harness.engine.settings import TimingConfig
    from xmfu.harness.engine.timing import Series, warm_up

    series = Series("torch", lambda: None, FlushingTimer(lambda: time.sleep(0.005)))
    warm_up(series, TimingConfig(warmup_s=0, warmup_min_iters=2, min_sample_s=0.001, max_inner=100))
    assert series.inner == 1 and series.timer.last_wall_s >= 0.005


def test_each_timer_carries_the_sync_rule_its_row_records():
    from xmfu.harness.machine import sync

    assert timer_for("torch", "cpu").sync == sync.TORCH_RULES["cpu"]
    assert timer_for("host", "cpu").sync == sync.HOST_RULE
    assert timer_for("torch", "cpu", flush=lambda: None).sync == sync.TORCH_RULES["cpu"]
    assert timer_for("jax", "cpu").sync == sync.JAX_RULE
