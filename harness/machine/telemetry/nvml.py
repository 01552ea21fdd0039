"""NVIDIA through NVML (package nvidia-ml-py, module pynvml). Units: NVML power is mW, energy mJ."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from harness.machine.telemetry.base import Reading

# nvmlDeviceGetCurrentClocksEventReasons bits (nvml.h: nvmlClocksEventReason*)
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                 0x100: "display_clocks"}


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


class NvmlSampler:
    name = "nvml"
    available = True
    background = True  # sampled by a thread during the window
    reason = ""
    energy_wrap_j = None  # 64-bit mJ counter: no wrap in practice

    def __init__(self, index: int, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        nvml.nvmlInit()
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        # Renamed in newer NVML; the older name still exists in older nvidia-ml-py releases.
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def _try(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(self.handle, *args)
        except Exception:  # NVMLError_NotSupported on some parts / in some containers
            return None

    def read(self) -> Reading:
        n = self.nvml
        power = self._try(n.nvmlDeviceGetPowerUsage)
        energy = self._try(n.nvmlDeviceGetTotalEnergyConsumption)
        limit = self._try(n.nvmlDeviceGetEnforcedPowerLimit)
        mask = self._try(self._reasons)
        return Reading(
            t=time.perf_counter(), power_w=power / 1e3 if power is not None else None,
            energy_j=energy / 1e3 if energy is not None else None,
            sm_clock_mhz=self._try(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
            mem_clock_mhz=self._try(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
            temp_c=self._try(n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU),
            throttle=throttle_names(mask) if mask is not None else [],
            power_limit_w=limit / 1e3 if limit is not None else None,
        )

    def static(self) -> dict[str, Any]:
        n = self.nvml
        limit = self._try(n.nvmlDeviceGetEnforcedPowerLimit)
        driver = None
        with contextlib.suppress(Exception):
            driver = n.nvmlSystemGetDriverVersion()
        return {"api": "nvml", "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "power_limit_w": limit / 1e3 if limit is not None else None,
                "max_sm_clock_mhz": self._try(n.nvmlDeviceGetMaxClockInfo, n.NVML_CLOCK_SM),
                "max_mem_clock_mhz": self._try(n.nvmlDeviceGetMaxClockInfo, n.NVML_CLOCK_MEM)}
