"""The amdsmi sampler on tests/fakes/amdsmi_fake.py at each ROCm release's return shapes: every field read on
its own, "N/A" is unknown, the device is found by PCI bus id, perf level, processes, probe."""

from __future__ import annotations

import os
import sys

import pytest

from tests.fakes import amdsmi_fake as af
from tests.fakes.torch_cuda_props import mi300x
from xmfu.harness.machine.platform import DeviceInfo, Platform, describe_torch_device
from xmfu.harness.machine.telemetry import Unavailable, open_sampler
from xmfu.harness.machine.telemetry.amdsmi import AmdSmiSampler
from xmfu.harness.machine.telemetry.base import PROBE_KEYS

NA16, NA32 = af.NA16, af.NA32


def _device(**kw) -> DeviceInfo:
    kw.setdefault("pci_bus_id", "0000:0c:00.0")
    return DeviceInfo(kind="rocm", name="AMD Instinct MI300X", vendor="amd", **kw)


def _sampler(version="6.3.0", gpus=None, device=None) -> tuple[AmdSmiSampler, af.FakeAmdSmi]:
    fake = af.FakeAmdSmi(version, gpus or [af.FakeAmdGpu()])
    return AmdSmiSampler(device or _device(), amdsmi=fake), fake


@pytest.mark.parametrize("version", af.VERSIONS)
def test_amdsmi_every_field_at_every_release(version):
    sampler, _ = _sampler(version)
    r = sampler.read()
    assert r.power_w == 540 and r.power_source == "amdsmi_get_power_info current_socket_power"
    assert r.energy_j == pytest.approx(2_000_000 * 15.259 / 1e6)  # 6.1/6.2 call the accumulator 'power'
    assert (r.sm_clock_mhz, r.mem_clock_mhz, r.temp_c, r.power_limit_w) == (2100.0, 1300.0, 70, 750.0)
    assert r.throttle == ["throttled"]
    assert sampler.static()["driver"] == "6.8.5"


def test_amdsmi_one_missing_field_loses_only_that_field():
    gpu = af.FakeAmdGpu(errors={"amdsmi_get_energy_count": af.AMDSMI_STATUS_NOT_SUPPORTED})
    sampler, _ = _sampler(gpus=[gpu])
    r = sampler.read()
    assert r.energy_j is None and r.power_w == 540 and r.sm_clock_mhz == 2100.0
    assert "AMDSMI_STATUS_NOT_SUPPORTED" in sampler.probe()["energy_j"]["reason"]


@pytest.mark.parametrize("version", af.VERSIONS)
def test_amdsmi_na_and_sentinels_are_unknown_never_values(version):
    # 6.2+ say "N/A"; 6.1 hands back the raw 0xFFFF that 6.2 turns into "N/A"
    na_flags = {f"active_{n}": 0xFF for n in ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm")}
    gpu = af.FakeAmdGpu(current_w=NA16, average_w=NA16, throttle=NA32, indep_throttle=af.NA64, violations=na_flags)
    sampler, _ = _sampler(version, [gpu])
    r = sampler.read()
    assert r.power_w is None and r.power_source is None
    assert r.throttle is None  # unknown, never "not throttled"
    probe = sampler.probe()
    assert "N/A" in probe["power_w"]["reason"] and "N/A" in probe["throttle"]["reason"]


def test_amdsmi_power_falls_back_to_the_average_when_current_is_na():
    sampler, _ = _sampler("6.2.0", [af.FakeAmdGpu(current_w=NA16, average_w=530)])  # only the average filled
    r = sampler.read()
    assert r.power_w == 530 and r.power_source == "amdsmi_get_power_info average_socket_power"


def test_amdsmi_clock_na_at_7():
    sampler, _ = _sampler("7.0.2", [af.FakeAmdGpu(gfx_mhz=NA32)])
    assert sampler.read().sm_clock_mhz is None and "N/A" in sampler.probe()["sm_clock_mhz"]["reason"]


def test_amdsmi_finds_the_timed_gpu_by_pci_bus_id(monkeypatch):
    # HIP_VISIBLE_DEVICES=3: torch's device 0 is amdsmi's GPU 3 (bus 5c)
    fake = af.eight_mi300x()
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    device = describe_torch_device(mi300x(physical=3, pci=(0, 0x5C, 0)), 0, "6.3.42131")
    sampler = open_sampler(Platform("rocm", (device,), "test"))
    assert not isinstance(sampler, Unavailable), sampler.reason
    assert sampler.read().sm_clock_mhz == 2003.0
    identity = sampler.static()["identity"]
    assert identity["resolved_by"] == "pci_bus_id" and identity["pci_bus_id"] == "0000:5c:00.0"
    assert identity["serial"] == "0xD4A1B2C3E5F60A03" and identity["uuid"] == af.FakeAmdGpu().uuid


def test_amdsmi_bdf_scan_matches_when_the_function_differs():
    fake = af.eight_mi300x()
    fake.gpus[5].bdf = (0, 0xAF, 0, 1)  # a function torch cannot report: from_bdf("...af:00.0") fails
    sampler = AmdSmiSampler(_device(pci_bus_id="0000:af:00.0"), amdsmi=fake)
    assert sampler.read().sm_clock_mhz == 2005.0
    assert sampler.static()["identity"]["resolved_by"] == "pci_bus_id (scan)"
    with pytest.raises(LookupError, match="not found"):
        AmdSmiSampler(_device(pci_bus_id="0000:ee:00.0"), amdsmi=fake)


def test_amdsmi_ordinal_fallback_only_without_pci_bus_id_and_said():
    sampler, _ = _sampler(gpus=af.eight_mi300x().gpus, device=_device(index=2, pci_bus_id=None))
    identity = sampler.static()["identity"]
    assert identity["resolved_by"] == "ordinal" and "amdsmi index 2" in identity["warning"]
    assert sampler.read().sm_clock_mhz == 2002.0


@pytest.mark.parametrize(("level", "locked"), [("AMDSMI_DEV_PERF_LEVEL_AUTO", False),
                                               ("AMDSMI_DEV_PERF_LEVEL_MANUAL", True),
                                               ("AMDSMI_DEV_PERF_LEVEL_STABLE_PEAK", True),
                                               ("AMDSMI_DEV_PERF_LEVEL_DETERMINISM", True),
                                               ("AMDSMI_DEV_PERF_LEVEL_UNKNOWN", None)])
def test_amdsmi_clocks_locked_from_perf_level(level, locked):
    sampler, _ = _sampler("6.1.0", [af.FakeAmdGpu(perf_level=level)])
    clocks = sampler.static()["clocks"]
    assert clocks["locked"] is locked and clocks["detail"]["perf_level"] == level


def test_amdsmi_gfx_clk_locked_and_unreadable_perf_level():
    sampler, _ = _sampler("6.2.0", [af.FakeAmdGpu(gfx_locked=1)])
    assert sampler.static()["clocks"]["locked"] is True
    gpu = af.FakeAmdGpu(errors={"amdsmi_get_gpu_perf_level": af.AMDSMI_STATUS_NOT_SUPPORTED,
                                "amdsmi_get_clock_info": af.AMDSMI_STATUS_NOT_SUPPORTED})
    unknown, _ = _sampler("6.3.0", [gpu])
    assert unknown.static()["clocks"]["locked"] is None and unknown.static()["clocks"]["reason"]


@pytest.mark.parametrize("version", af.VERSIONS)
def test_amdsmi_processes_at_every_release(version):
    me = os.getpid()
    gpu = af.FakeAmdGpu(processes=[{"name": "python3", "pid": me, "vram_mem": 3 << 30},
                                   {"name": "", "pid": 999, "vram_mem": 1 << 30}])
    sampler, _ = _sampler(version, [gpu])
    procs = {p["pid"]: p for p in sampler.processes()}
    assert procs[me] == {"pid": me, "used_memory_bytes": 3 << 30, "name": "python3", "kinds": ["compute"],
                         "is_self": True}
    assert procs[999]["name"] is None and procs[999]["is_self"] is False


def test_amdsmi_processes_unreadable():
    gpu = af.FakeAmdGpu(errors={"amdsmi_get_gpu_process_list": af.AMDSMI_STATUS_NO_PERM})
    sampler, _ = _sampler(gpus=[gpu])
    assert sampler.processes() is None and "AMDSMI_STATUS_NO_PERM" in sampler.processes_reason


def test_amdsmi_probe_covers_every_field():
    sampler, _ = _sampler("6.1.0")
    probe = sampler.probe()
    assert set(probe) == set(PROBE_KEYS)
    for key, entry in probe.items():
        assert entry["value"] is not None or entry["reason"], key
    assert probe["energy_j"]["source"] == "amdsmi_get_energy_count power (the accumulator before ROCm 6.3)"


@pytest.mark.parametrize("version", ["6.3.0", "7.0.2"])
def test_amdsmi_violation_status_names_the_limit_that_holds_the_clock(version):
    # an MI300X at its power cap: gpu_metrics says only "throttled"; the violation status says which limit
    gpu = af.FakeAmdGpu(throttle=1, indep_throttle=1, violations={"active_ppt_pwr": 1, "active_hbm_thrm": 1})
    sampler, _ = _sampler(version, [gpu])
    r = sampler.read()
    assert r.throttle == ["hbm_thermal", "indep_throttled", "ppt_power", "throttled"]
    assert "amdsmi_get_violation_status active_ppt_pwr" in sampler.probe()["throttle"]["source"]


def test_amdsmi_violation_status_alone_answers_when_throttle_status_is_na():
    gpu = af.FakeAmdGpu(throttle=NA32, indep_throttle=af.NA64, violations={"active_socket_thrm": 1})
    sampler, _ = _sampler("6.3.0", [gpu])
    assert sampler.read().throttle == ["socket_thermal"]
    assert "throttle_status is" in sampler.probe()["throttle"]["reason"]


@pytest.mark.parametrize("version", ["6.1.0", "6.2.0"])
def test_amdsmi_without_violation_status_still_reads_gpu_metrics(version):
    sampler, _ = _sampler(version, [af.FakeAmdGpu(throttle=0, indep_throttle=1)])
    assert sampler.read().throttle == ["indep_throttled"]
    assert "amdsmi_get_violation_status is not in this amdsmi" in sampler.probe()["throttle"]["reason"]


def test_amdsmi_violation_status_not_supported_off_mi300():
    gpu = af.FakeAmdGpu(throttle=0, errors={"amdsmi_get_violation_status": af.AMDSMI_STATUS_NOT_SUPPORTED})
    sampler, _ = _sampler("6.3.0", [gpu])
    assert sampler.read().throttle == []
    assert "AMDSMI_STATUS_NOT_SUPPORTED" in sampler.probe()["throttle"]["reason"]
