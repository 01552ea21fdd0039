"""Each torch runtime call outside the CUDA/ROCm-specific places goes through machine/torch_device.py: on a fake
xpu/neuron accelerator (tests/fakes/torch_accelerator.py) it reaches torch.accelerator or the device module and
never torch.cuda; on a CUDA fake (tests/fakes/torch_cuda.py, with torch.accelerator present as on torch 2.8+) the
calls are the torch.cuda ones xmfu made before."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch as real_torch

from tests.fakes.torch_accelerator import FakeAcceleratorTorch
from tests.fakes.torch_cuda import FakeTorch, h100_sxm
from xmfu.harness import api
from xmfu.harness.engine.timers import FlushingTimer, timer_for
from xmfu.harness.machine import frameworks, sync, torch_device
from xmfu.workloads.collectives import torch_dist
from xmfu.workloads.transformer import torch_comm, torch_parity, torch_profile


@pytest.fixture
def install(monkeypatch):
    def put(fake):
        fake.__spec__ = getattr(fake, "__spec__", None) or __import__("importlib").machinery.ModuleSpec("torch", None)
        fake.OutOfMemoryError = real_torch.OutOfMemoryError
        monkeypatch.setitem(sys.modules, "torch", fake)
        return fake
    return put


def cuda_fake() -> FakeTorch:
    return FakeTorch([h100_sxm(), h100_sxm(0x19)], runtime=True)


@pytest.mark.parametrize("device_type", ["xpu", "neuron"])
def test_peak_memory_is_the_accelerators_allocator_not_the_hosts_rss(install, device_type):
    fake = install(FakeAcceleratorTorch(device_type))
    fake.allocated, fake.peak = 10, 123
    assert torch_comm.peak_memory_now(f"{device_type}:1") == 123
    torch_comm.reset_peak_memory(f"{device_type}:1")
    assert torch_comm.peak_memory_now(f"{device_type}:1") == 10
    assert fake.cuda_calls == []


def test_before_torch_2_8_the_peak_is_the_device_modules_or_not_measured(install):
    xpu = install(FakeAcceleratorTorch("xpu", surface="2.6"))
    xpu.peak = 77
    assert torch_comm.peak_memory_now("xpu:0") == 77  # torch.xpu.max_memory_allocated
    install(FakeAcceleratorTorch("neuron", surface="2.6"))
    assert torch_comm.peak_memory_now("neuron:0") is None  # neither has the call: not measured, never guessed


def test_peak_memory_on_cuda_is_torch_cuda_as_before(install):
    fake = install(cuda_fake())
    torch_comm.reset_peak_memory("cuda:1")
    assert torch_comm.peak_memory_now("cuda:1") == 7
    assert fake.calls == [("reset_peak_memory_stats", "cuda:1"), ("max_memory_allocated", "cuda:1")]


def test_the_parity_reference_empties_the_accelerators_cache(install, monkeypatch):
    fake = install(FakeAcceleratorTorch("neuron"))
    tries = []

    def step(run, device, attend):
        tries.append(device)
        if device != "cpu":
            raise real_torch.OutOfMemoryError("no room")
        return {"loss": 1.0}

    monkeypatch.setattr(torch_parity, "_single_device_step", step)
    out = torch_parity.single_device_reference(None, "neuron:0", None)
    assert tries == ["neuron:0", "cpu"] and out["device"].startswith("cpu")
    assert fake.calls == [("empty_cache", None), ("empty_cache", None)] and fake.cuda_calls == []
    cuda = install(cuda_fake())
    torch_parity.single_device_reference(None, "cuda:0", None)
    assert cuda.calls == [("empty_cache", None), ("empty_cache", None)]  # torch.cuda.empty_cache, not accelerator's


def test_the_current_device_string_names_the_accelerator(install):
    assert torch_device.current_device(install(FakeAcceleratorTorch("xpu")), "xpu") == "xpu:0"
    fake = install(FakeAcceleratorTorch("neuron", surface="2.6"))
    fake.current = 1
    assert torch_device.current_device(fake, "neuron") == "neuron:1" and fake.cuda_calls == []
    cuda = install(cuda_fake())
    assert torch_device.current_device(cuda, "cuda") == "cuda:0" and cuda.calls == [("current_device", None)]


@contextmanager
def _profiler(monkeypatch):
    """torch.profiler's profile(activities=...) context with export_chrome_trace(path) (torch 2.13
    torch/profiler/profiler.py), writing an empty trace."""
    module = ModuleType("torch.profiler")
    module.ProfilerActivity = SimpleNamespace(CPU="CPU", CUDA="CUDA")

    @contextmanager
    def profile(activities=None):
        prof = SimpleNamespace(export_chrome_trace=lambda path: Path(path).write_text("{}"))
        yield prof

    module.profile = profile
    monkeypatch.setitem(sys.modules, "torch.profiler", module)
    yield


def test_a_profiler_trace_waits_for_the_accelerator(install, monkeypatch):
    with _profiler(monkeypatch):
        fake = install(FakeAcceleratorTorch("xpu"))
        assert torch_profile.chrome_trace(fake.kernel, "xpu:0") == b"{}"
        assert fake.calls == [("synchronize", "xpu:0")] and fake.cuda_calls == []
        cuda = install(cuda_fake())
        torch_profile.chrome_trace(lambda: None, "cuda:1")
        assert cuda.calls == [("synchronize", "cuda:1")]


def test_a_rank_on_an_accelerator_makes_its_device_current(install, monkeypatch):
    dist = ModuleType("torch.distributed")
    dist.is_initialized = lambda: True  # the group exists: only the per-process current device is set
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    fake = install(FakeAcceleratorTorch("xpu"))
    fake.distributed = dist
    torch_dist.process_group("xpu", 1, 10.0)
    assert fake.calls == [("set_device", "1")] and fake.current == 1 and fake.cuda_calls == []
    cuda = install(cuda_fake())
    cuda.distributed = dist
    torch_dist.process_group("cuda", 1, 10.0)
    assert cuda.calls == [("set_device", 1)]


def test_cached_memory_is_released_on_the_accelerator(install):
    fake = install(FakeAcceleratorTorch("xpu"))
    frameworks.release_cached_memory()
    assert fake.calls == [("empty_cache", None)] and fake.cuda_calls == []
    old = install(FakeAcceleratorTorch("xpu", surface="2.6"))
    frameworks.release_cached_memory()
    assert old.calls == [("xpu.empty_cache", None)] and old.cuda_calls == []
    cuda = install(cuda_fake())
    frameworks.release_cached_memory()
    assert cuda.calls == [("is_initialized", None), ("empty_cache", None)]


def test_a_python_api_candidate_on_an_intel_gpu_is_timed_by_torch(install):
    fake = install(FakeAcceleratorTorch("xpu"))
    out = SimpleNamespace(is_cuda=False, device=SimpleNamespace(type="xpu"))
    assert api.timer_framework(out, "xpu") == ("torch", "")
    assert fake.cuda_calls == []
    with pytest.raises(api.Unavailable, match="device='cpu'"):
        api.timer_framework(out, "cpu")
    install(FakeTorch([h100_sxm()]))
    assert api.timer_framework(SimpleNamespace(is_cuda=True), "cuda") == ("torch", "")


def test_a_flushed_sample_on_an_intel_gpu_uses_device_generic_events(install):
    fake = install(FakeAcceleratorTorch("xpu", kernel_s=2e-3))
    flushes = []
    timer = timer_for("torch", "xpu", flush=lambda: flushes.append(1), device="xpu:0")
    assert isinstance(timer, FlushingTimer) and timer.name.startswith("torch.Event per call")
    assert timer.sync == sync.TORCH_RULES["xpu"]
    assert timer.measure(fake.kernel, 3) == pytest.approx(2e-3) and len(flushes) == 3
    assert ("event.synchronize", "xpu:0") in fake.calls and fake.cuda_calls == []


def _flushed_row(tmp_path, monkeypatch, fake: FakeAcceleratorTorch) -> tuple[dict, list]:
    """A one-case run with timing.flush_l2 on the fake accelerator (the test's run of test_torch_device.py)."""
    from tests.conftest import QUICK_TIMING, run_config
    from tests.machine.test_torch_device import _Case
    from xmfu.harness.engine import runner as runner_module
    from xmfu.harness.engine.case import Prepared
    from xmfu.harness.engine.context import RunContext
    from xmfu.harness.engine.registry import Implementation, WorkloadDef
    from xmfu.harness.machine.platform import DeviceInfo, Platform
    from xmfu.harness.results.bundle.reader import read_bundle
    from xmfu.harness.results.bundle.writer import BundleWriter

    buffers = []

    def flush_buffer(cache_bytes, device):
        buffers.append(device)
        return (lambda: None), 1 << 26

    monkeypatch.setattr(runner_module, "flush_buffer", flush_buffer)
    kind = fake.device_type
    device = DeviceInfo(kind=kind, name=f"fake {kind}", vendor="x", torch_device_type=kind)
    config = run_config(workload={"name": "fake"}, backends=["good"],
                        timing=QUICK_TIMING | {"min_sample_s": 0.001, "flush_l2": True})
    writer = BundleWriter(tmp_path / "b", {"run_id": "r", "created": "2026-11-23T00:00:00Z", "xmfu_version": "0",
                                           "git_sha": None, "argv": [], "overrides": [], "comparability_key": "k"},
                          "", {})
    impl = Implementation("good", lambda c, x: (True, ""),
                          lambda c, x: Prepared(fake.kernel, lambda rows: __import__("numpy").ones(4), "torch"))
    run = runner_module.CaseRunner(RunContext(config, Platform(kind, (device,), "test")), writer, "r", lambda r: None)
    run.run_phase(runner_module.Phase("main", WorkloadDef("fake", lambda *a: [_Case()], {"good": impl}), [_Case()],
                                      ["good"]))
    writer.finalize("complete")
    return read_bundle(tmp_path / "b").raw_rows[0], buffers


def test_a_flushed_run_flushes_an_intel_gpus_cache_on_the_gpu_and_says_a_read_back_one_is_not(
        install, monkeypatch, tmp_path):
    row, buffers = _flushed_row(tmp_path / "x", monkeypatch, install(FakeAcceleratorTorch("xpu")))
    timer = row["timer"]
    assert buffers == ["xpu:0"] and timer["flush_l2_bytes"] == 1 << 26 and timer["name"].startswith("torch.Event per")
    row, buffers = _flushed_row(tmp_path / "n", monkeypatch, install(FakeAcceleratorTorch("neuron")))
    assert row["timer"]["flush_l2_bytes"].startswith("not applied: a read-back timer")


def test_a_profiler_trace_records_the_accelerators_kernels_activity(monkeypatch):
    """CUDA (ROCm too), XPU and HPU by name; an out-of-tree device (TorchNeuron) through PrivateUse1 when torch knows
    it under that name; nothing beyond host ops where torch has no such activity."""
    import torch
    from torch.profiler import ProfilerActivity

    from xmfu.workloads.transformer.torch_profile import device_activities

    assert device_activities(torch, ProfilerActivity, "cpu") == []
    assert device_activities(torch, ProfilerActivity, "cuda:1") == [ProfilerActivity.CUDA]
    assert device_activities(torch, ProfilerActivity, "xpu:0") == [ProfilerActivity.XPU]
    # torch 2.6's ProfilerActivity has no HPU member (2.13's has): none, then only host ops, as the docstring says
    hpu = getattr(ProfilerActivity, "HPU", None)
    assert device_activities(torch, ProfilerActivity, "hpu") == ([hpu] if hpu is not None else [])
    assert device_activities(torch, ProfilerActivity, "neuron:0") == []  # not the PrivateUse1 name here
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "neuron")
    assert device_activities(torch, ProfilerActivity, "neuron:0") == [ProfilerActivity.PrivateUse1]
