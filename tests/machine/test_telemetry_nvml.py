"""The NVML sampler on tests/fakes/pynvml_fake.py (nvidia-ml-py 12.560.30 names, units, errors): the device it
reads is the one torch times, power is instantaneous where the driver has it, clocks locked or not, other
processes on the GPU, and a probe that says what each field really returns."""

from __future__ import annotations

import os
import sys

import pytest

from tests.fakes import pynvml_fake as pf
from tests.fakes.torch_cuda_props import h100
from xmfu.harness.machine.platform import DeviceInfo, Platform, describe_torch_device
from xmfu.harness.machine.telemetry import Unavailable, open_sampler
from xmfu.harness.machine.telemetry.base import PROBE_KEYS
from xmfu.harness.machine.telemetry.nvml import NvmlSampler, throttle_names


def _device(**kw) -> DeviceInfo:
    return DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", vendor="nvidia", **kw)


def _sampler(gpus=None, device=None, **kw) -> tuple[NvmlSampler, pf.FakePynvml]:
    fake = pf.FakePynvml(gpus or [pf.FakeGpu()], **kw)
    return NvmlSampler(device or _device(uuid="5a1b2c00-0001-0203-0405-060708090a0b"), nvml=fake), fake


def test_nvml_units_and_throttle_reasons():
    sampler, _ = _sampler()
    r = sampler.read()
    assert (r.energy_j, r.sm_clock_mhz, r.mem_clock_mhz, r.power_limit_w, r.temp_c) == (1000.0, 1755, 2619, 700.0, 61)
    assert r.throttle == ["sw_power_cap", "sw_thermal"]
    assert throttle_names(0x8 | 0x40) == ["hw_slowdown", "hw_thermal"]
    static = sampler.static()
    assert static["max_sm_clock_mhz"] == 1980 and static["driver"] == "570.86.15"


def test_nvml_power_is_the_instantaneous_field_where_the_driver_has_it():
    sampler, _ = _sampler()  # nvmlDeviceGetPowerUsage says 650 W (a 1 s average on Hopper), the field 662 W
    r = sampler.read()
    assert r.power_w == 662.0 and r.power_source == "NVML_FI_DEV_POWER_INSTANT"
    assert sampler.static()["power_source"]["reading"] == "NVML_FI_DEV_POWER_INSTANT"
    assert sampler.static()["energy_source"].startswith("nvmlDeviceGetTotalEnergyConsumption")


@pytest.mark.parametrize("value_type", [pf.NVML_VALUE_TYPE_SIGNED_INT, pf.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                        pf.NVML_VALUE_TYPE_DOUBLE])
def test_nvml_field_value_read_by_its_value_type(value_type):
    sampler, _ = _sampler([pf.FakeGpu(instant_type=value_type)])
    assert sampler.read().power_w == 662.0


@pytest.mark.parametrize("gpu", [pf.FakeGpu(instant_mw=None),  # field not supported: nvmlReturn != SUCCESS
                                 pf.FakeGpu(errors={"nvmlDeviceGetFieldValues": pf.NVML_ERROR_FUNCTION_NOT_FOUND})])
def test_nvml_power_falls_back_to_power_usage_and_says_so(gpu):
    sampler, _ = _sampler([gpu])
    r = sampler.read()
    assert r.power_w == 650.0 and r.power_source == "nvmlDeviceGetPowerUsage"
    source = sampler.static()["power_source"]
    assert source["reading"] == "nvmlDeviceGetPowerUsage" and "1 s" in source["note"]


def test_nvml_not_supported_loses_only_that_field():
    gpu = pf.FakeGpu(errors={"nvmlDeviceGetTotalEnergyConsumption": pf.NVML_ERROR_NOT_SUPPORTED,
                             "nvmlDeviceGetCurrentClocksEventReasons": pf.NVML_ERROR_NOT_SUPPORTED,
                             "nvmlDeviceGetCurrentClocksThrottleReasons": pf.NVML_ERROR_NOT_SUPPORTED})
    sampler, _ = _sampler([gpu])
    r = sampler.read()
    assert r.energy_j is None and r.power_w == 662.0 and r.sm_clock_mhz == 1755
    assert r.throttle is None  # unknown, not "nothing limits the clock"
    probe = sampler.probe()
    assert probe["energy_j"]["value"] is None and "Not Supported" in probe["energy_j"]["reason"]


def test_nvml_finds_the_timed_gpu_by_uuid_under_cuda_visible_devices(monkeypatch):
    # CUDA_VISIBLE_DEVICES=3: torch's device 0 is physical GPU 3; NVML's index 0 is physical GPU 0.
    fake = pf.FakePynvml(pf.four_gpus())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    device = describe_torch_device(h100(physical=3, pci=(0, 0x5D, 0)), 0, None)
    sampler = open_sampler(Platform("cuda", (device,), "test"))
    assert not isinstance(sampler, Unavailable), sampler.reason
    assert sampler.read().sm_clock_mhz == 1703  # GPU 3's clock, not GPU 0's
    identity = sampler.static()["identity"]
    assert identity["resolved_by"] == "uuid" and identity["uuid"] == "GPU-5a1b2c03-0001-0203-0405-060708090a0b"
    assert identity["pci_bus_id"] == "00000000:5D:00.0" and identity["serial"] == "1650123456703"
    assert "nvmlDeviceGetHandleByUUID(GPU-5a1b2c03-0001-0203-0405-060708090a0b)" in fake.calls


def test_nvml_finds_the_timed_gpu_by_pci_bus_id_when_torch_has_no_uuid():
    sampler, fake = _sampler(pf.four_gpus(), _device(index=0, pci_bus_id="0000:3a:00.0"))
    assert sampler.read().sm_clock_mhz == 1702
    assert sampler.static()["identity"]["resolved_by"] == "pci_bus_id"
    assert "nvmlDeviceGetHandleByPciBusId(0000:3a:00.0)" in fake.calls


def test_nvml_uuid_lookup_failure_falls_to_pci_then_never_to_the_ordinal():
    device = _device(index=0, uuid="00000000-dead-beef-0000-000000000000", pci_bus_id="0000:2a:00.0")
    sampler, _ = _sampler(pf.four_gpus(), device)
    identity = sampler.static()["identity"]
    assert identity["resolved_by"] == "pci_bus_id" and "Not Found" in identity["tried"][0]
    with pytest.raises(LookupError, match="not found"):  # known identity, no match: no telemetry, not GPU 0's
        _sampler(pf.four_gpus(), _device(index=0, uuid="00000000-dead-beef-0000-000000000000"))


def test_nvml_ordinal_fallback_only_without_identity_and_said(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    sampler, fake = _sampler(pf.four_gpus(), _device(index=0))
    identity = sampler.static()["identity"]
    assert identity["resolved_by"] == "ordinal" and "CUDA_VISIBLE_DEVICES=3" in identity["warning"]
    assert "identity" in sampler.reason and fake.calls[1] == "nvmlDeviceGetHandleByIndex(0)"


def test_nvml_clocks_locked_from_application_clocks():
    locked, _ = _sampler([pf.FakeGpu(app_clocks={pf.NVML_CLOCK_SM: 1410, pf.NVML_CLOCK_MEM: 2619})])
    clocks = locked.static()["clocks"]
    assert clocks["locked"] is True and clocks["detail"]["applications_sm_mhz"] == 1410
    assert clocks["detail"]["default_applications_sm_mhz"] == 1980
    free, _ = _sampler([pf.FakeGpu(reasons=0)])
    assert free.static()["clocks"]["locked"] is False
    event, _ = _sampler([pf.FakeGpu(reasons=pf.nvmlClocksEventReasonApplicationsClocksSetting)])
    assert event.static()["clocks"]["locked"] is True
    errors = dict.fromkeys(("nvmlDeviceGetApplicationsClock", "nvmlDeviceGetDefaultApplicationsClock",
                            "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
                           pf.NVML_ERROR_NOT_SUPPORTED)
    unknown, _ = _sampler([pf.FakeGpu(errors=errors)])
    assert unknown.static()["clocks"]["locked"] is None and unknown.static()["clocks"]["reason"]


def test_nvml_clocks_say_which_query_answered():
    by_app, _ = _sampler([pf.FakeGpu(app_clocks={pf.NVML_CLOCK_SM: 1410, pf.NVML_CLOCK_MEM: 2619})])
    assert by_app.static()["clocks"]["source"] == "nvmlDeviceGetApplicationsClock vs " \
                                                   "nvmlDeviceGetDefaultApplicationsClock"
    by_event, _ = _sampler([pf.FakeGpu(reasons=pf.nvmlClocksEventReasonApplicationsClocksSetting)])
    assert by_event.static()["clocks"]["source"] == "nvmlDeviceGetCurrentClocksEventReasons applications_clocks"
    # a driver past the applications-clocks deprecation (NVML v580 change log): the event reason alone answers
    gone = dict.fromkeys(("nvmlDeviceGetApplicationsClock", "nvmlDeviceGetDefaultApplicationsClock"),
                         pf.NVML_ERROR_NOT_SUPPORTED)
    reasons_only, _ = _sampler([pf.FakeGpu(reasons=0, errors=gone)])
    clocks = reasons_only.static()["clocks"]
    assert clocks["locked"] is False
    assert clocks["source"] == "nvmlDeviceGetCurrentClocksEventReasons applications_clocks"
    # no NVML getter reports an -lgc lock: recorded as not readable, never as "not locked"
    assert clocks["detail"]["gpu_locked_clocks"] is None and "-lgc" in clocks["detail"]["note"]


def test_nvml_processes_on_the_timed_gpu():
    me = os.getpid()
    gpu = pf.FakeGpu(compute=[(me, 2 << 30), (4242, 1 << 30)], graphics=[(4242, 1 << 30), (77, None)])
    sampler, _ = _sampler([gpu], names={4242: "python3"})
    procs = {p["pid"]: p for p in sampler.processes()}
    assert procs[me]["is_self"] and procs[me]["kinds"] == ["compute"] and procs[me]["used_memory_bytes"] == 2 << 30
    assert procs[4242] == {"pid": 4242, "used_memory_bytes": 1 << 30, "name": "python3",
                           "kinds": ["compute", "graphics"], "is_self": False}
    assert procs[77]["used_memory_bytes"] is None and procs[77]["name"] is None
    assert sampler.processes_reason is None


def test_nvml_processes_not_readable_is_none_with_reason():
    errors = {"nvmlDeviceGetComputeRunningProcesses": pf.NVML_ERROR_NO_PERMISSION,
              "nvmlDeviceGetGraphicsRunningProcesses": pf.NVML_ERROR_NO_PERMISSION}
    sampler, _ = _sampler([pf.FakeGpu(errors=errors)])
    assert sampler.processes() is None and "Insufficient Permissions" in sampler.processes_reason


def test_nvml_probe_says_what_each_field_returns():
    gpu = pf.FakeGpu(instant_mw=None, errors={"nvmlDeviceGetTemperature": pf.NVML_ERROR_NOT_SUPPORTED})
    sampler, _ = _sampler([gpu])
    probe = sampler.probe()
    assert set(probe) == set(PROBE_KEYS)
    for key, entry in probe.items():
        assert entry["value"] is not None or entry["reason"], key
    assert probe["temp_c"]["value"] is None and "Not Supported" in probe["temp_c"]["reason"]
    assert probe["power_source"]["value"] == "nvmlDeviceGetPowerUsage"
    assert probe["identity"]["value"]["resolved_by"] == "uuid" and probe["processes"]["value"] == []
    assert probe["clocks"]["value"]["locked"] is False


@pytest.mark.parametrize("kw", [{"missing": ("nvmlDeviceGetCurrentClocksEventReasons",)},  # older nvidia-ml-py
                                {"gpus": [pf.FakeGpu(errors={"nvmlDeviceGetCurrentClocksEventReasons":  # older driver
                                                             pf.NVML_ERROR_FUNCTION_NOT_FOUND})]}])
def test_nvml_clocks_event_reasons_under_the_older_name(kw):
    sampler, _ = _sampler(**kw)
    assert sampler.read().throttle == ["sw_power_cap", "sw_thermal"]  # from ...ThrottleReasons


def _jax_gpu(hardware_id: int) -> DeviceInfo:
    """A GPU as JAX describes it: no UUID, no PCI bus id (jaxlib's PJRT attributes have neither)."""
    from tests.fakes.jax_devices import h100 as jax_h100
    from xmfu.harness.machine.platform import describe_jax_device

    device = describe_jax_device(jax_h100(hardware_id), 0)  # the only local device of its process
    assert device.uuid is None and device.pci_bus_id is None and device.hardware_id == hardware_id
    return device


def test_nvml_maps_a_jax_gpu_through_an_abbreviated_uuid_in_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5a1b2c03,GPU-5a1b2c02")  # CUDA accepts UUID prefixes
    sampler, _ = _sampler(pf.four_gpus(), _jax_gpu(1))
    identity = sampler.static()["identity"]
    assert identity["resolved_by"] == "uuid (CUDA_VISIBLE_DEVICES)" and identity["warning"] is None
    assert identity["pci_bus_id"] == "00000000:3A:00.0" and "CUDA device 1 is GPU-5a1b2c02" in identity["mapping"]


def test_nvml_maps_a_jax_gpu_by_pci_order_under_pci_bus_id(monkeypatch):
    gpus = pf.four_gpus()
    nvml_order = [gpus[3], gpus[0], gpus[2], gpus[1]]  # NVML's index "may not correlate with" CUDA's
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    sampler, _ = _sampler(nvml_order, _jax_gpu(1))  # CUDA device 1 = physical 1 = second lowest bus, 0x2a
    identity = sampler.static()["identity"]
    assert identity["resolved_by"] == "pci_bus_id (CUDA_VISIBLE_DEVICES, PCI_BUS_ID order)"
    assert identity["pci_bus_id"] == "00000000:2A:00.0" and identity["warning"] is None


def test_nvml_does_not_guess_cuda_s_fastest_first_order(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    sampler, _ = _sampler(pf.four_gpus(), _jax_gpu(1))
    identity = sampler.static()["identity"]
    assert identity["resolved_by"] == "ordinal" and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in identity["warning"]
    assert any("fastest first" in t for t in identity["tried"])
