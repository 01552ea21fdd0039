"""Telemetry: aggregation on recorded readings (counter wrap-around, gaps, throttle fractions, clock-adjusted
MFU), the CPU, TPU and unavailable samplers, and steady-state detection. The vendor samplers are tested on
fakes of the real modules in test_telemetry_nvml.py and test_telemetry_amdsmi.py."""

from __future__ import annotations

import pytest

from xmfu.harness.machine.telemetry import Unavailable, open_sampler
from xmfu.harness.machine.telemetry.aggregate import counter_energy, efficiency, summarize_window, window
from xmfu.harness.machine.telemetry.base import PROBE_KEYS, Reading
from xmfu.harness.machine.telemetry.cpu import CpuSampler, cpu_clocks
from xmfu.harness.machine.telemetry.recorder import Recorder


def test_missing_vendor_library_is_unavailable_not_a_crash():
    from xmfu.harness.machine.platform import DeviceInfo, Platform

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


def test_throttle_unknown_is_not_zero():
    rs = [Reading(t=0.0, throttle=None), Reading(t=1.0, throttle=["hw_thermal"]), Reading(t=2.0, throttle=[])]
    assert summarize_window(rs, None)["throttle_fraction"] == {"hw_thermal": 0.5}  # of the 2 readings that know
    assert summarize_window(rs[:1], None)["throttle_fraction"] is None  # nothing known: not "never throttled"


def _probe_is_complete(sampler):
    probe = sampler.probe()
    assert set(probe) == set(PROBE_KEYS)
    for key, entry in probe.items():
        assert entry["value"] is not None or entry["reason"], key
    return probe


def test_cpu_probe_and_unreadable_fields_said():
    probe = _probe_is_complete(CpuSampler())
    assert probe["sm_clock_mhz"]["value"] > 0 and probe["processes"]["value"] is None
    assert probe["throttle"]["reason"] and probe["mem_clock_mhz"]["reason"]


def test_unavailable_probe_gives_the_reason_everywhere():
    sampler = Unavailable("ImportError: no pynvml")
    probe = _probe_is_complete(sampler)
    assert probe["power_w"]["reason"] == "telemetry unavailable: ImportError: no pynvml"
    assert sampler.processes() is None and sampler.processes_reason == sampler.reason


def test_tpu_probe_with_jax_here():
    from xmfu.harness.machine.telemetry.tpu import TpuSampler

    probe = _probe_is_complete(TpuSampler(0))  # jax's CPU device stands in: the same calls, nothing exposed
    assert probe["power_w"]["value"] is None and "not exposed" in probe["power_w"]["reason"]


def _cpufreq(folder, governor, low, high):
    folder.mkdir()
    (folder / "scaling_governor").write_text(governor + "\n")
    (folder / "scaling_min_freq").write_text(f"{low}\n")
    (folder / "scaling_max_freq").write_text(f"{high}\n")
    return folder


def test_cpu_clocks_from_cpufreq(tmp_path):
    free = cpu_clocks(_cpufreq(tmp_path / "a", "powersave", 800000, 3800000))
    assert free["locked"] is False and free["detail"]["governor"] == "powersave"
    pinned = cpu_clocks(_cpufreq(tmp_path / "b", "performance", 2000000, 2000000))
    assert pinned["locked"] is True and pinned["detail"]["scaling_max_freq_khz"] == 2000000
    assert cpu_clocks(_cpufreq(tmp_path / "c", "userspace", 800000, 3800000))["locked"] is True
    missing = cpu_clocks(tmp_path / "none")
    assert missing["locked"] is None and "cpufreq" in missing["reason"]


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
    from xmfu.harness.engine.steady import steady_state

    # 1 sample per second for 60 s: fast (boost) for 20 s, then 10% slower and stable
    samples = [1.0 if i < 20 else 1.1 for i in range(60)]
    intervals = [(float(i), i + 0.5) for i in range(60)]
    result = steady_state(samples, intervals, window_s=10, tolerance=0.02, flops=1e12)
    assert result["reached_after_s"] == 20 and result["reached"]
    assert result["first_vs_steady_time_change"] == pytest.approx(1.0 / 1.1 - 1)
    assert result["first_window"]["tflops"] == pytest.approx(1.0)
