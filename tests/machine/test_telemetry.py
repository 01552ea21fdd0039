"""Telemetry: vendor samplers on fake NVML/amdsmi modules (real names and units), aggregation on recorded
readings (counter wrap-around, gaps, throttle fractions, clock-adjusted MFU), the CPU sampler here, and
steady-state detection."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.machine.telemetry import Unavailable, open_sampler
from harness.machine.telemetry.aggregate import counter_energy, efficiency, summarize_window, window
from harness.machine.telemetry.amdsmi import AmdSmiSampler
from harness.machine.telemetry.base import Reading
from harness.machine.telemetry.cpu import CpuSampler
from harness.machine.telemetry.nvml import NvmlSampler, throttle_names
from harness.machine.telemetry.recorder import Recorder


class FakeNvml:
    """pynvml's names and units: power in mW, energy in mJ, clocks in MHz, reasons as a bitmask."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, series):
        self.series, self.i = series, -1

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"gpu{i}"

    def _now(self):
        return self.series[self.i]

    def nvmlDeviceGetPowerUsage(self, h):
        self.i += 1  # first query of a reading advances the recording
        return self._now()["mw"]

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self._now()["mj"]

    def nvmlDeviceGetClockInfo(self, h, kind):
        return self._now()["sm"] if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h, kind):
        return 61

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._now()["reasons"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700_000

    def nvmlSystemGetDriverVersion(self):
        return "570.86.15"


def test_nvml_units_and_throttle_reasons():
    fake = FakeNvml([{"mw": 650_000, "mj": 1_000_000, "sm": 1755, "reasons": 0x4 | 0x20}])
    sampler = NvmlSampler(0, nvml=fake)
    r = sampler.read()
    assert (r.power_w, r.energy_j, r.sm_clock_mhz, r.mem_clock_mhz, r.power_limit_w) == (650.0, 1000.0, 1755, 2619,
                                                                                         700.0)
    assert r.throttle == ["sw_power_cap", "sw_thermal"]
    assert throttle_names(0x8 | 0x40) == ["hw_slowdown", "hw_thermal"]
    assert sampler.static()["max_sm_clock_mhz"] == 1980 and sampler.static()["driver"] == "570.86.15"


def _fake_amdsmi(power_w=540, acc=2_000_000, res=15.3, clk=2100, throttle=1):
    def clock_info(h, kind):
        return {"clk": clk if kind == "GFX" else 1300, "min_clk": 500, "max_clk": 2100}

    return SimpleNamespace(
        amdsmi_init=lambda: None, amdsmi_get_processor_handles=lambda: ["h0"],
        amdsmi_get_power_info=lambda h: {"current_socket_power": power_w, "average_socket_power": power_w - 5},
        amdsmi_get_energy_count=lambda h: {"energy_accumulator": acc, "counter_resolution": res, "timestamp": 0},
        amdsmi_get_clock_info=clock_info, AmdSmiClkType=SimpleNamespace(GFX="GFX", MEM="MEM"),
        amdsmi_get_temp_metric=lambda h, kind, metric: 70,
        AmdSmiTemperatureType=SimpleNamespace(HOTSPOT="HOTSPOT"), AmdSmiTemperatureMetric=SimpleNamespace(CURRENT=0),
        amdsmi_get_gpu_metrics_info=lambda h: {"throttle_status": throttle},
        amdsmi_get_power_cap_info=lambda h: {"power_cap": 750_000_000},
        amdsmi_get_gpu_driver_info=lambda h: {"driver_version": "6.8.5"})


def test_amdsmi_units():
    r = AmdSmiSampler(0, amdsmi=_fake_amdsmi()).read()
    assert r.power_w == 540 and r.energy_j == pytest.approx(2_000_000 * 15.3 / 1e6)
    assert (r.sm_clock_mhz, r.mem_clock_mhz, r.temp_c, r.power_limit_w) == (2100.0, 1300.0, 70, 750.0)
    assert r.throttle == ["throttled"]


def test_missing_vendor_library_is_unavailable_not_a_crash():
    from harness.machine.platform import DeviceInfo, Platform

    rocm = Platform("rocm", (DeviceInfo(kind="rocm", name="AMD Instinct MI300X", vendor="amd"),), "test")
    sampler = open_sampler(rocm)  # amdsmi is not installed here (and needs libamd_smi.so when it is)
    assert isinstance(sampler, Unavailable) and sampler.reason.startswith("telemetry unavailable:")


def test_counter_energy_handles_wrap_and_gaps():
    points = [(0.0, 100.0), (1.0, 300.0), (2.0, None), (3.0, 500.0), (4.0, 50.0), (5.0, 150.0)]
    # 0-1: 200 J; 1-2 and 2-3: gap; 3-4: wrapped at 1000 J -> 550 J; 4-5: 100 J
    assert counter_energy(points, wrap_j=1000.0) == (850.0, 3.0)
    # without a known range a decrease is a reset: that interval is dropped
    assert counter_energy(points, wrap_j=None) == (300.0, 2.0)


def _readings():
    return [Reading(t=float(i), power_w=500 + 10 * i, energy_j=1000.0 + 510 * i, sm_clock_mhz=1980 - 20 * i,
                    throttle=["sw_power_cap"] if i >= 2 else []) for i in range(5)]


def test_window_summary_throttle_fractions_and_clock_adjusted_mfu():
    rs = _readings()
    s = summarize_window(rs, None)
    assert s["mean_power_w"] == pytest.approx(510.0) and s["power_source"] == "energy counter"
    assert s["max_power_w"] == 540 and s["throttle_fraction"] == {"sw_power_cap": 0.6}
    assert s["mean_sm_clock_mhz"] == pytest.approx(1940.0)
    e = efficiency(s, tflops=700.0, median_s=0.002, mfu=0.7, peak_clock_mhz=1980)
    assert e["energy_per_iter_j"] == pytest.approx(510 * 0.002)
    assert e["tflops_per_watt"] == pytest.approx(700 / 510)
    assert e["mfu_clock_adjusted"] == pytest.approx(0.7 * 1980 / 1940)
    assert [r.t for r in window(rs, [(0.9, 1.1), (3.0, 3.05)], slack=0.05)] == [1.0, 3.0]


def test_cpu_sampler_reads_what_this_machine_exposes():
    sampler = CpuSampler()
    r = sampler.read()
    assert r.sm_clock_mhz and r.sm_clock_mhz > 0  # /proc/cpuinfo is always there on Linux
    if not sampler.packages:
        assert "RAPL energy" in sampler.reason  # said once, clearly
    assert sampler.background is False


def test_cpu_sampler_rapl_wrap_from_sysfs(tmp_path):
    pkg = tmp_path / "intel-rapl:0"
    pkg.mkdir()
    (pkg / "energy_uj").write_text("123456789\n")
    (pkg / "max_energy_range_uj").write_text("262143328850\n")
    sampler = CpuSampler(powercap=tmp_path, thermal=tmp_path / "none")
    assert sampler.read().energy_j == pytest.approx(123.456789)
    assert sampler.energy_wrap_j == pytest.approx(262143.32885)


def test_recorder_reads_both_ends_without_a_thread_for_cpu():
    recorder = Recorder(CpuSampler(), rate_hz=100)
    recorder.start()
    readings = recorder.stop()
    assert len(readings) == 2 and readings[0].t <= readings[1].t


def test_steady_state_detects_settling():
    from harness.engine.steady import steady_state

    # 1 sample per second for 60 s: fast (boost) for 20 s, then 10% slower and stable
    samples = [1.0 if i < 20 else 1.1 for i in range(60)]
    intervals = [(float(i), i + 0.5) for i in range(60)]
    result = steady_state(samples, intervals, window_s=10, tolerance=0.02, flops=1e12)
    assert result["reached_after_s"] == 20 and result["reached"]
    assert result["first_vs_steady_time_change"] == pytest.approx(1.0 / 1.1 - 1)
    assert result["first_window"]["tflops"] == pytest.approx(1.0)
