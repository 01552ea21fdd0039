"""The device-agnostic torch path on a fake accelerator (tests/fakes/torch_accelerator.py, torch 2.13's and 2.6's
torch.accelerator): detection, device calls with their fallbacks, the timer each sync rule picks, and the row's
`sync` record."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.conftest import QUICK_TIMING, run_config
from tests.fakes.torch_accelerator import FakeAcceleratorTorch
from xmfu.harness.engine.case import Check, Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.registry import Implementation, WorkloadDef
from xmfu.harness.engine.runner import CaseRunner, Phase
from xmfu.harness.engine.timers import ReadBackTimer, TorchEventTimer, timer_for
from xmfu.harness.machine import sync, torch_device
from xmfu.harness.machine.platform import DeviceInfo, Platform, detect
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.bundle.writer import BundleWriter


@pytest.fixture
def fake_torch(monkeypatch):
    def install(*args, **kwargs) -> FakeAcceleratorTorch:
        fake = FakeAcceleratorTorch(*args, **kwargs)
        monkeypatch.setitem(sys.modules, "torch", fake)
        return fake
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    return install


@pytest.mark.parametrize("surface", ["2.13", "2.6"])
def test_detection_reports_the_torch_device_type_and_the_vendor(fake_torch, monkeypatch, surface):
    """Before: detection asked torch.cuda only, so a Trainium host was measured as its CPU."""
    fake_torch("neuron", count=2, surface=surface)
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    platform = detect(frameworks=("torch",))
    assert platform.kind == "neuron" and len(platform.devices) == 2
    dev = platform.devices[1]
    assert (dev.vendor, dev.torch_device_type, dev.name, dev.index) == ("aws", "neuron", "Trainium2", 1)
    assert dev.multiprocessors == 2  # one torch device = one logical NeuronCore of LNC physical cores


def test_an_intel_gpu_is_xpu_and_gaudi_is_hpu(fake_torch):
    fake_torch("xpu", count=1, name="Intel(R) Data Center GPU Max 1550")
    assert (detect(frameworks=("torch",)).device.vendor, detect(frameworks=("torch",)).kind) == ("intel", "xpu")
    fake_torch("hpu", count=8, name="GAUDI3")
    platform = detect(frameworks=("torch",))
    assert platform.kind == "hpu" and platform.device.multiprocessors is None  # unknown, never guessed


def test_device_calls_use_torch_accelerator_and_fall_back_on_torch_2_6():
    new, old = FakeAcceleratorTorch(surface="2.13"), FakeAcceleratorTorch(surface="2.6")
    for fake in (new, old):
        assert torch_device.accelerator_type(fake) == "neuron" and torch_device.device_count(fake) == 2
        torch_device.set_device(fake, "neuron:1")  # 2.6: set_device_idx; 2.7+: set_device_index
        assert fake.current == 1
    new.allocated, new.peak = 10, 99
    assert torch_device.max_memory_allocated(new, "neuron:1") == 99
    torch_device.reset_peak_memory_stats(new, "neuron:1")
    assert torch_device.max_memory_allocated(new, "neuron:1") == 10
    assert torch_device.max_memory_allocated(old, "neuron:1") is None  # 2.6 has no such call: not measured


def test_a_torch_without_torch_accelerator_is_asked_through_torch_cuda():
    from tests.fakes.torch_cuda import torch_cpu_only, torch_cuda

    assert torch_device.accelerator_type(torch_cuda(2)) == "cuda"
    assert torch_device.accelerator_type(torch_cpu_only()) is None


def test_trainium_is_timed_by_a_read_back_on_the_device_it_measures(fake_torch):
    fake = fake_torch("neuron")
    timer = timer_for("torch", "neuron", device="neuron:1")
    assert isinstance(timer, ReadBackTimer) and timer.sync.method == sync.READ_BACK
    assert ("set_device", "neuron:1") in fake.calls
    assert timer.measure(fake.kernel, 5) > 0
    with pytest.raises(RuntimeError, match="no tensor to read back"):
        timer.measure(lambda: None, 2)


def test_an_intel_gpu_is_timed_by_device_generic_events(fake_torch):
    fake = fake_torch("xpu", kernel_s=2e-3)
    timer = timer_for("torch", "xpu", device="xpu:0")
    assert isinstance(timer, TorchEventTimer) and timer.name == "torch.Event"
    assert timer.measure(fake.kernel, 4) == pytest.approx(2e-3)
    assert ("synchronize", "xpu:0") in fake.calls and ("event.synchronize", "xpu:0") in fake.calls


def test_every_platform_kind_has_a_rule_and_torch_on_a_tpu_proves_none():
    assert sync.sync_rule("torch", "cuda").method == sync.CUDA_EVENT
    assert sync.sync_rule("jax", "tpu").method == sync.BLOCK
    assert not sync.sync_rule("torch", "tpu").proven and sync.sync_rule("torch", "tpu").method is None
    assert not sync.sync_rule("torch", "made-up").proven


class _Case:
    size, dtype, workload, flop_convention, case_id = 1, "bf16", "fake", "fake/1", "fake-1"

    def params(self):
        return {"size": 1}

    def flops(self):
        return 1e6

    def bytes_moved(self):
        return 1e3

    def check_rows(self):
        return None

    def check(self, rows):
        return Check(True, 0.0, 1e-6, "max abs", "all")


def _rows(tmp_path, kind: str, fake: FakeAcceleratorTorch) -> dict:
    device = DeviceInfo(kind=kind, name=f"fake {kind}", vendor="x", torch_device_type=fake.device_type)
    config = run_config(workload={"name": "fake"}, backends=["good"], timing=QUICK_TIMING | {"min_sample_s": 0.001})
    ctx = RunContext(config, Platform(kind, (device,), "test"))
    assert ctx.torch_device == f"{fake.device_type}:0"
    writer = BundleWriter(tmp_path / "b", {"run_id": "r", "created": "2026-11-23T00:00:00Z", "xmfu_version": "0",
                                           "git_sha": None, "argv": [], "overrides": [], "comparability_key": "k"},
                          "", {})
    impl = Implementation("good", lambda c, x: (True, ""),
                          lambda c, x: Prepared(fake.kernel, lambda rows: np.ones(4), "torch"))
    runner = CaseRunner(ctx, writer, "r", lambda row: None)
    runner.run_phase(Phase("main", WorkloadDef("fake", lambda *a: [_Case()], {"good": impl}), [_Case()], ["good"]))
    writer.finalize("complete")
    assert validate_bundle(tmp_path / "b") == []
    return read_bundle(tmp_path / "b").raw_rows[0]


def test_a_row_records_its_sync_and_an_unproven_one_is_checked_not_timed(fake_torch, tmp_path):
    row = _rows(tmp_path / "n", "neuron", fake_torch("neuron"))
    assert row["status"] == "ok" and row["timing_valid"] and row["time_s"]["n"] >= 3
    assert row["sync"]["method"] == sync.READ_BACK and "OperatorX" in row["sync"]["reason"]
    row = _rows(tmp_path / "t", "tpu", fake_torch("tpu"))
    assert row["status"] == "ok" and row["timing_valid"] is False and row["time_s"] is None
    assert row["sync"]["method"] is None and "TorchTPU" in row["sync"]["reason"] and row["mfu"] is None


def test_a_one_off_wait_follows_the_devices_sync_rule():
    """A workload's first-call time (compile time) ends when the device is done: by a read-back on Trainium, whose
    synchronize is reported to return early; by torch.accelerator.synchronize on an XPU; not at all on the host."""
    read = []

    class Out:
        def reshape(self, *shape):
            return self

        def __getitem__(self, i):
            return self

        def item(self):
            read.append(True)
            return 0.0

    neuron, xpu = FakeAcceleratorTorch("neuron"), FakeAcceleratorTorch("xpu")
    torch_device.wait_for(neuron, "neuron:0", Out())
    assert read == [True] and not neuron.calls
    torch_device.wait_for(xpu, "xpu:0", Out())
    assert xpu.calls == [("synchronize", "xpu:0")] and read == [True]
    torch_device.wait_for(xpu, "cpu", Out())
    assert len(xpu.calls) == 1
