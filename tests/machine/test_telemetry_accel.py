"""Neuron (neuron-monitor, neuron-ls) and Gaudi (habana-pyhlml) telemetry, issue 29 item 4: recorded outputs, a
fake built from pyhlml's real signatures, and pyhlml's real failure without its driver library."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from tests.fakes.neuron_monitor import MONITOR_LINE, MONITOR_REPORT, NEURON_LS
from tests.fakes.pyhlml_fake import FakeHlml
from xmfu.harness.machine.platform import DeviceInfo, Platform
from xmfu.harness.machine.telemetry import open_sampler
from xmfu.harness.machine.telemetry.hlml import HlmlSampler
from xmfu.harness.machine.telemetry.neuron import (
    NeuronSampler,
    core_counters,
    ecc_counts,
    hardware_info,
    parse_neuron_ls,
)

GAUDI = DeviceInfo(kind="hpu", name="GAUDI3", vendor="intel", pci_bus_id="0000:19:00.0")


def test_monitor_report_gives_utilisation_hardware_flops_latency_and_memory_of_a_core():
    one = core_counters(MONITOR_REPORT, 1)
    assert one["neuroncore_utilization_pct"] == 42.02 and one["hardware_flops_per_s"] == 1234567891021
    assert one["device_latency_p50_s"] == 0.01000008 and one["device_memory_used_bytes"] == 12519788544
    assert one["errors"] == []
    idle = core_counters(MONITOR_REPORT, 7)
    assert idle["hardware_flops_per_s"] is None and "not in use" in idle["errors"][0]


def test_monitor_report_ecc_and_hardware_info_with_the_lnc_degree():
    assert ecc_counts(MONITOR_REPORT) == {"mem_ecc_corrected": 0, "mem_ecc_uncorrected": 0,
                                          "sram_ecc_corrected": 0, "sram_ecc_uncorrected": 0}
    assert ecc_counts({"system_data": {}}) is None
    info = hardware_info(MONITOR_REPORT)
    assert info["logical_neuroncore_config"] == 2 and info["neuron_device_type"] == "trainium2"
    assert info["instance_type"] == "trn2n.48xlarge"


def test_neuron_ls_json_has_devices_and_no_driver_version():
    (dev,) = parse_neuron_ls(NEURON_LS)
    assert dev == {"index": 0, "bdf": "0000:00:1e.0", "cores": 2, "memory_bytes": 34359738368, "processes": []}


class _Proc:
    def __init__(self, lines):
        self.stdout = io.StringIO("".join(lines))
        self.terminated = False

    def terminate(self):
        self.terminated = True


def test_neuron_sampler_follows_the_monitor_stream_and_says_what_it_cannot_read():
    procs = []

    def popen(cmd, **kw):
        assert cmd == ["neuron-monitor"]
        procs.append(_Proc(["not json\n", MONITOR_LINE + "\n"]))
        return procs[-1]

    sampler = NeuronSampler(DeviceInfo(kind="neuron", name="Trainium2", vendor="aws", index=0), popen=popen)
    assert sampler.wait_for_report(2.0)
    sampler._thread.join(2.0)
    assert sampler.parse_errors == 1
    assert sampler.counters()["hardware_flops_per_s"] == 1234567891011
    assert sampler.read().power_w is None
    probe = sampler.probe()
    assert probe["power_w"]["value"] is None and "no power" in probe["power_w"]["reason"]
    assert sampler.static()["hardware"]["logical_neuroncore_config"] == 2
    sampler.close()
    assert procs[0].terminated


def test_no_neuron_monitor_on_the_path_is_recorded_not_raised(monkeypatch):
    def missing(*a, **k):
        raise FileNotFoundError(2, "No such file or directory", "neuron-monitor")

    monkeypatch.setattr("subprocess.Popen", missing)
    plat = Platform(kind="neuron", devices=(DeviceInfo(kind="neuron", name="Trainium2", vendor="aws"),), reason="t")
    sampler = open_sampler(plat)
    assert not sampler.available and "neuron-monitor" in sampler.reason


def test_hlml_sampler_units_throttle_and_violations_from_the_fake():
    fake = FakeHlml()
    sampler = HlmlSampler(GAUDI, hlml=fake)
    reading = sampler.read()
    assert reading.power_w == pytest.approx(412.0) and reading.energy_j == pytest.approx(9000.0)
    assert reading.sm_clock_mhz == 1600 and reading.temp_c == 54 and reading.power_limit_w == pytest.approx(600)
    assert reading.throttle == ["power"] and reading.mem_clock_mhz is None
    assert ("hlmlDeviceGetHandleByPCIBusID", "handle:0000:19:00.0") in fake.calls
    static = sampler.static()
    assert static["name"] == "HL-325L" and static["driver"] == "1.24.2-481"
    assert static["violations"]["thermal"]["violation_time"] == 500


def test_hlml_field_not_supported_loses_that_field_only():
    sampler = HlmlSampler(GAUDI, hlml=FakeHlml(unsupported={"hlmlDeviceGetTotalEnergyConsumption"}))
    reading = sampler.read()
    assert reading.energy_j is None and reading.power_w is not None
    assert "energy_j" in sampler.reason and "HLMLError_NotSupported" in sampler.probe()["energy_j"]["reason"]


PYHLML_SCRATCH = Path("/tmp/pyhlml-t")  # `pip install --target` of habana-pyhlml 1.24.2.481, where one was made


def test_real_pyhlml_without_its_driver_library_raises_uninitialised_and_is_recorded(monkeypatch):
    """habana-pyhlml 1.24.2.481: hlmlInit() without libhlml prints "Failed to load libhlml" and raises
    HLMLError_Uninitialized ("HLML Error with code 1"); open_sampler records it, the run goes on."""
    if PYHLML_SCRATCH.is_dir():
        monkeypatch.syspath_prepend(str(PYHLML_SCRATCH))
    pyhlml = pytest.importorskip("pyhlml", reason="habana-pyhlml is not installed (pip install habana-pyhlml)")
    with pytest.raises(pyhlml.hlml_error.HLMLError) as raised:  # its subclasses are made at import, by code
        pyhlml.hlmlInit()
    assert type(raised.value).__name__ == "HLMLError_Uninitialized"
    sampler = open_sampler(Platform(kind="hpu", devices=(GAUDI,), reason="t"))
    assert not sampler.available and "HLMLError_Uninitialized" in sampler.reason
    sys.modules.pop("pyhlml", None)
