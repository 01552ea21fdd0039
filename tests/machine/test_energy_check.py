"""The start-up check of an energy counter against power x time (Zeus's rule), on fakes of NVML and amdsmi with
their real units, and RAPL in a made-up sysfs; then a fake-NVML run whose J/step, J/token and tokens/s/W are
worked out by hand from its bundle, and a forged energy figure that `xmfu validate` refuses."""

from __future__ import annotations

import json
import pathlib
import time
from dataclasses import dataclass

import numpy as np
import pytest

from tests.fakes import amdsmi_fake as af
from tests.fakes import pynvml_fake as pf
from xmfu.harness.machine.peaks import CPU_TDP_NOTE
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.telemetry.amdsmi import AmdSmiSampler
from xmfu.harness.machine.telemetry.cpu import CpuSampler
from xmfu.harness.machine.telemetry.energy_check import check
from xmfu.harness.machine.telemetry.nvml import NvmlSampler

UUID = "5a1b2c00-0001-0203-0405-060708090a0b"


class LiveNvml(pf.FakePynvml):
    """NVML whose energy counter (mJ) grows at the GPU's power as time passes, as a real one does."""

    def __init__(self, gpus, watts_counted: float | None = None) -> None:
        super().__init__(gpus)
        self.t0, self.watts = time.perf_counter(), watts_counted

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        gpu = self._check(handle, "nvmlDeviceGetTotalEnergyConsumption")
        watts = self.watts if self.watts is not None else gpu.power_mw / 1e3
        return gpu.energy_mj + int(watts * (time.perf_counter() - self.t0) * 1e3)


def _nvml(gpu=None, **kw) -> NvmlSampler:
    device = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", vendor="nvidia", uuid=UUID)
    return NvmlSampler(device, nvml=LiveNvml([gpu or pf.FakeGpu(power_mw=650_000, instant_mw=650_000)], **kw))


def test_a_counter_that_agrees_with_power_is_used():
    got = check(_nvml(), wait_s=0.2)  # long enough that a busy host's read latency moves the ratio little
    assert got.counter and got.power and got.reason is None and got.scope == "device"
    assert got.ratio == pytest.approx(1.0, rel=0.25) and "nvmlDeviceGetTotalEnergyConsumption" in got.counter_name


def test_a_counter_that_disagrees_with_power_is_disabled_with_the_reason():
    got = check(_nvml(watts_counted=6.5), wait_s=0.05)  # counts 1/100 of the power: ratio 0.01
    assert not got.counter and got.power
    assert "counter disabled" in got.reason and "outside 0.1-10" in got.reason and got.ratio < 0.1


def test_an_amdsmi_accumulator_far_from_power_is_disabled():
    gpu = af.FakeAmdGpu()  # 540 W; the accumulator does not move (ROCm/amdsmi issue #38's symptom)
    sampler = AmdSmiSampler(DeviceInfo(kind="rocm", name="AMD Instinct MI300X", vendor="amd",
                                       pci_bus_id="0000:0c:00.0"), amdsmi=af.FakeAmdSmi("6.3.0", [gpu]))
    got = check(sampler, wait_s=0.05)
    assert not got.counter and got.power and got.measured_j == 0.0 and "ratio 0" in got.reason


class LiveAmdSmi(af.FakeAmdSmi):
    """amdsmi whose energy accumulator counts at the GPU's power in units of counter_resolution (uJ), as a real one."""

    def __init__(self, version, gpus) -> None:
        super().__init__(version, gpus)
        self.t0 = time.perf_counter()

    def amdsmi_get_energy_count(self, handle):
        out = super().amdsmi_get_energy_count(handle)
        gpu = self.gpus[0]
        ticks = int(gpu.current_w * (time.perf_counter() - self.t0) * 1e6 / gpu.resolution)
        return {k: v + ticks if k in ("power", "energy_accumulator") else v for k, v in out.items()}


@pytest.mark.parametrize("version", af.VERSIONS)
def test_an_amdsmi_accumulator_times_its_resolution_agrees_with_power_in_every_release(version):
    sampler = AmdSmiSampler(DeviceInfo(kind="rocm", name="AMD Instinct MI300X", vendor="amd",
                                       pci_bus_id="0000:0c:00.0"), amdsmi=LiveAmdSmi(version, [af.FakeAmdGpu()]))
    got = check(sampler, wait_s=0.2)  # long enough that a busy host's read latency moves the ratio little
    assert got.counter and got.ratio == pytest.approx(1.0, rel=0.25), got


def test_a_device_without_power_of_its_own_is_not_measured():
    gpu = af.FakeAmdGpu(current_w=0)  # an MI250X odd chiplet: its power is reported by its sibling
    sampler = AmdSmiSampler(DeviceInfo(kind="rocm", name="AMD Instinct MI250X", vendor="amd",
                                       pci_bus_id="0000:0c:00.0"), amdsmi=af.FakeAmdSmi("6.3.0", [gpu]))
    got = check(sampler, wait_s=0.05)
    assert not got.counter and not got.power and "no power of its own" in got.reason


def test_a_counter_without_permission_says_so():
    gpu = pf.FakeGpu(errors={"nvmlDeviceGetTotalEnergyConsumption": pf.NVML_ERROR_NO_PERMISSION})
    got = check(_nvml(gpu), wait_s=0.05)
    assert not got.counter and got.power and "NoPermission" in got.reason


def test_rapl_wraps_at_its_range_and_denied_or_absent_rapl_is_named(tmp_path, monkeypatch):
    pkg = tmp_path / "intel-rapl:0"
    pkg.mkdir()
    (pkg / "energy_uj").write_text("262000000000\n")
    (pkg / "max_energy_range_uj").write_text("262143328850\n")
    sampler = CpuSampler(powercap=tmp_path, thermal=tmp_path)
    assert sampler.energy_wrap_j == pytest.approx(262143.32885)
    got = check(sampler, wait_s=0.0)  # RAPL gives no power: the counter is kept, unchecked
    assert got.counter and got.scope == "cpu package" and "not checked" in got.reason
    assert "is not there" in check(CpuSampler(powercap=tmp_path / "none", thermal=tmp_path)).reason
    real = pathlib.Path.read_text

    def denied(self, *a, **kw):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self, *a, **kw)

    monkeypatch.setattr(pathlib.Path, "read_text", denied)
    assert "permission denied" in check(CpuSampler(powercap=tmp_path, thermal=tmp_path)).reason


@dataclass(frozen=True)
class TokenCase:
    """A case of tests/engine/test_runner.py that counts 2048 tokens per call, as a training step does."""

    size: int = 1
    dtype: str = "fp32"
    workload = "fake"
    flop_convention = "fake/1"
    case_id = "fake-1"

    def params(self):
        return {"size": self.size}

    def flops(self):
        return 1e3

    def bytes_moved(self):
        return 1e3

    def work_units(self):
        return {"tokens": 2048}

    def check_rows(self):
        return None

    def check(self, rows):
        from xmfu.harness.engine.case import Check

        return Check(True, 0.0, 1e-6, "max abs", "all")


def _fake_nvml_run(tmp_path, device=None, **settings):
    from tests.conftest import QUICK_TIMING, run_config
    from tests.engine.test_runner import IMPLS
    from xmfu.harness.engine.context import RunContext
    from xmfu.harness.engine.registry import WorkloadDef
    from xmfu.harness.engine.runner import CaseRunner, Phase
    from xmfu.harness.machine.platform import Platform, cpu_device
    from xmfu.harness.results.bundle.writer import BundleWriter

    # samples of 50 ms: a reading's counter is read a moment after its timestamp, and on a loaded host that moment
    # stretches; over 10 ms samples it moved the by-hand power to 728 W for the fake's 650 (make test beside another)
    config = run_config(workload={"name": "fake"}, backends=["good"], timing={**QUICK_TIMING, "min_sample_s": 0.05},
                        telemetry={"enabled": True, "rate_hz": 200.0}, **settings)
    writer = BundleWriter(tmp_path / "b", {"run_id": "r", "created": "2026-12-02T00:00:00Z", "xmfu_version": "0",
                                           "git_sha": None, "argv": [], "overrides": [], "comparability_key": "k"},
                          "", {})
    runner = CaseRunner(RunContext(config, Platform("cpu", (device or cpu_device(),), "test")), writer, "r",
                        lambda row: None, sampler=_nvml())
    runner.run_phase(Phase("main", WorkloadDef("fake", lambda *a: [TokenCase()], IMPLS), [TokenCase()], ["good"]))
    writer.finalize("complete")
    return tmp_path / "b"


def test_a_fake_nvml_run_gives_j_per_step_j_per_token_and_tokens_per_watt_as_worked_by_hand(tmp_path):
    from xmfu.harness.results.bundle.validator import validate_bundle

    folder = _fake_nvml_run(tmp_path)
    row = json.loads((folder / "cases.jsonl").read_text().splitlines()[0])
    rec = json.loads((folder / "samples.jsonl").read_text().splitlines()[0])
    tel = [json.loads(line) for line in (folder / "telemetry.jsonl").read_text().splitlines()]
    e = row["energy"]
    assert e["source"] == "counter" and e["scope"] == "device" and e["counter_check"]["ratio"] > 0.1
    # by hand: the counter (J) interpolated at each sample's start and end (clipped to the readings' span: a busy
    # host may take the first reading after the first sample began), summed over the samples
    ts, joules = [r["t"] for r in tel], [r["energy_j"] for r in tel]
    spans = [(max(a, ts[0]), min(b, ts[-1])) for a, b in rec["intervals"]]
    covered = sum(b - a for a, b in spans if b > a)
    watts = sum(np.interp(b, ts, joules) - np.interp(a, ts, joules) for a, b in spans if b > a) / covered
    median = row["time_s"]["median"]
    assert watts == pytest.approx(650.0, rel=0.25)  # what the fake draws (read-time jitter aside: see above)
    assert e["mean_power_w"] == pytest.approx(watts)
    assert e["energy_j"] == pytest.approx(watts * sum(b - a for a, b in rec["intervals"]))
    assert e["j_per_call"] == pytest.approx(watts * median)  # J per step
    tokens_per_s = 2048 / median
    assert e["j_per_token"] == {"tokens": pytest.approx(watts / tokens_per_s)}
    assert e["tokens_per_s_per_w"] == {"tokens": pytest.approx(tokens_per_s / watts)}
    # the timed device is this host's CPU: no TDP in the peak table, null with the note, no fraction
    assert e["tdp_w"] is None and e["tdp_fraction"] is None and e["tdp_source"] is None
    assert e["tdp_note"] == CPU_TDP_NOTE
    assert validate_bundle(folder) == []


def test_a_fake_nvml_run_on_an_h100_pcie_takes_its_share_of_the_sourced_tdp_as_worked_by_hand(tmp_path):
    """The product brief's 350 W (peaks.yaml) is the denominator: tdp_fraction = mean W / 350, worked out here from
    the bundle's own readings and intervals, and `xmfu validate` re-derives it."""
    from tests.conftest import gpu_device
    from xmfu.harness.results.bundle.validator import validate_bundle

    folder = _fake_nvml_run(tmp_path, device=gpu_device("NVIDIA H100 PCIe", 114))
    row = json.loads((folder / "cases.jsonl").read_text().splitlines()[0])
    rec = json.loads((folder / "samples.jsonl").read_text().splitlines()[0])
    tel = [json.loads(line) for line in (folder / "telemetry.jsonl").read_text().splitlines()]
    e = row["energy"]
    assert row["peak_entry"] == "nvidia-h100-pcie" and e["source"] == "counter"
    assert e["tdp_w"] == 350.0 and e["tdp_note"] is None and "PB-11133-001" in e["tdp_source"]
    ts, joules = [r["t"] for r in tel], [r["energy_j"] for r in tel]
    spans = [(max(a, ts[0]), min(b, ts[-1])) for a, b in rec["intervals"]]
    watts = (sum(np.interp(b, ts, joules) - np.interp(a, ts, joules) for a, b in spans if b > a)
             / sum(b - a for a, b in spans if b > a))
    assert e["tdp_fraction"] == pytest.approx(watts / 350.0)
    assert e["tdp_fraction"] == pytest.approx(650.0 / 350.0, rel=0.05)  # the fake draws 650 W: over the board's TDP
    assert validate_bundle(folder) == []
    cases = folder / "cases.jsonl"
    row["energy"]["tdp_fraction"] *= 0.5  # a device that seems to draw half its share
    cases.write_text(json.dumps(row, sort_keys=True) + "\n")
    _reseal(folder)
    assert any("energy.tdp_fraction" in p for p in validate_bundle(folder))
    row["energy"].update(tdp_fraction=e["tdp_fraction"], tdp_source=None)  # a TDP without its document
    cases.write_text(json.dumps(row, sort_keys=True) + "\n")
    _reseal(folder)
    assert any("a TDP is stated with the document" in p for p in validate_bundle(folder))


def _reseal(folder):
    """SHA256SUMS re-written for an edited cases.jsonl, so only the edited figure is wrong."""
    from xmfu.harness.results.schema import sha256_file

    sums = folder / "SHA256SUMS"
    sums.write_text("".join(f"{sha256_file(folder / name)}  {name}\n" if name == "cases.jsonl" else line + "\n"
                            for line in sums.read_text().splitlines() for name in [line.split()[-1]]))


def test_validate_refuses_a_forged_energy_figure(tmp_path):
    from xmfu.harness.results.bundle.validator import validate_bundle
    from xmfu.harness.results.schema import sha256_file

    folder = _fake_nvml_run(tmp_path)
    cases = folder / "cases.jsonl"
    row = json.loads(cases.read_text().splitlines()[0])
    row["energy"]["j_per_token"]["tokens"] *= 0.5  # a J/token twice as good as measured
    cases.write_text(json.dumps(row, sort_keys=True) + "\n")
    sums = folder / "SHA256SUMS"  # re-sealed, so only the figure is wrong
    sums.write_text("".join(f"{sha256_file(folder / name)}  {name}\n" if name == "cases.jsonl" else line + "\n"
                            for line in sums.read_text().splitlines() for name in [line.split()[-1]]))
    problems = validate_bundle(folder)
    assert any("energy.j_per_token.tokens" in p for p in problems), problems


def test_repeats_give_the_energy_figures_a_ci_that_validate_re_derives(tmp_path):
    from xmfu.harness.results.bundle.validator import validate_bundle

    folder = _fake_nvml_run(tmp_path, repeats=3)
    e = json.loads((folder / "cases.jsonl").read_text().splitlines()[0])["energy"]
    low, high = e["mean_power_w_ci95"]
    slack = 1e-9 * e["mean_power_w"]  # a counter at a constant 650 W: the repeats may agree to the last digit
    assert low - slack <= e["mean_power_w"] <= high + slack
    assert e["ci"].startswith("95% CI of mean power over the 3 repeats")
    j, (j_low, j_high) = e["j_per_token"]["tokens"], e["j_per_token_ci95"]["tokens"]
    assert j_low - 1e-9 * j <= j <= j_high + 1e-9 * j
    assert validate_bundle(folder) == []
