"""AMD through amdsmi (needs ROCm's libamd_smi.so; importing it without ROCm raises, which becomes
`telemetry unavailable`). Units: power W, power cap µW, energy = accumulator x resolution µJ, clocks MHz."""

from __future__ import annotations

import time
from typing import Any

from harness.machine.telemetry.base import Reading


class AmdSmiSampler:
    name = "amdsmi"
    available = True
    background = True  # sampled by a thread during the window
    reason = ""
    energy_wrap_j = None  # 64-bit accumulator

    def __init__(self, index: int, amdsmi: Any = None) -> None:
        if amdsmi is None:
            import amdsmi
        self.smi = amdsmi
        amdsmi.amdsmi_init()
        self.handle = amdsmi.amdsmi_get_processor_handles()[index]

    def _try(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(self.handle, *args)
        except Exception:  # AmdSmiLibraryException for unsupported queries (VM guests, older parts)
            return None

    def _clock(self, kind: Any) -> float | None:
        info = self._try(self.smi.amdsmi_get_clock_info, kind)
        return float(info["clk"]) if isinstance(info, dict) and "clk" in info else None

    def read(self) -> Reading:
        s = self.smi
        power = self._try(s.amdsmi_get_power_info) or {}
        watts = power.get("current_socket_power") or power.get("average_socket_power")
        energy = self._try(s.amdsmi_get_energy_count)
        joules = (energy["energy_accumulator"] * energy["counter_resolution"] / 1e6) if energy else None
        metrics = self._try(s.amdsmi_get_gpu_metrics_info) or {}
        status = metrics.get("throttle_status")
        cap = self._try(s.amdsmi_get_power_cap_info) or {}
        return Reading(
            t=time.perf_counter(), power_w=float(watts) if isinstance(watts, (int, float)) else None,
            energy_j=joules, sm_clock_mhz=self._clock(s.AmdSmiClkType.GFX),
            mem_clock_mhz=self._clock(s.AmdSmiClkType.MEM),
            temp_c=self._try(s.amdsmi_get_temp_metric, s.AmdSmiTemperatureType.HOTSPOT,
                             s.AmdSmiTemperatureMetric.CURRENT),
            throttle=["throttled"] if isinstance(status, (int, bool)) and status else [],
            power_limit_w=cap["power_cap"] / 1e6 if "power_cap" in cap else None,
        )

    def static(self) -> dict[str, Any]:
        cap = self._try(self.smi.amdsmi_get_power_cap_info) or {}
        gfx = self._try(self.smi.amdsmi_get_clock_info, self.smi.AmdSmiClkType.GFX) or {}
        driver = self._try(self.smi.amdsmi_get_gpu_driver_info) or {}
        return {"api": "amdsmi", "driver": driver.get("driver_version"),
                "power_limit_w": cap["power_cap"] / 1e6 if "power_cap" in cap else None,
                "max_sm_clock_mhz": gfx.get("max_clk")}
