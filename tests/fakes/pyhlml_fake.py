"""A stand-in for habana-pyhlml's `pyhlml` module, built from the real signatures of habana-pyhlml 1.24.2.481
(pyhlml/main.py: hlmlInit, hlmlDeviceGetHandleByPCIBusID / ByIndex, hlmlDeviceGetPowerUsage (mW),
hlmlDeviceGetTotalEnergyConsumption (mJ), hlmlDeviceGetClockInfo(device, clock_type) (MHz),
hlmlDeviceGetTemperature(device, sensor_type), hlmlDeviceGetCurrentClocksThrottleReasons (bit mask),
hlmlDeviceGetViolationStatus(device, perf_policy) -> c_hlml_violation_time, hlmlDeviceGetPowerManagementLimit (mW),
hlmlDeviceGetName -> bytes, hlmlGetDriverVersion -> bytes; pyhlml/hlml_error.py: HLMLError(code),
HLMLError_NotSupported). Values are made up; the shapes and units are the package's."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class HLMLError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(f"HLML Error with code {code}")
        self.value = code


class HLMLError_NotSupported(HLMLError):
    pass


@dataclass
class FakeHlml:
    power_mw: int = 412_000
    energy_mj: int = 9_000_000
    mme_mhz: int = 1600
    temp_c: int = 54
    throttle_mask: int = 1 << 0  # HLML_CLOCKS_THROTTLE_REASON_POWER
    limit_mw: int = 600_000
    unsupported: set[str] = field(default_factory=set)
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def _maybe(self, name: str, value: Any) -> Any:
        self.calls.append((name, value))
        if name in self.unsupported:
            raise HLMLError_NotSupported(3)
        return value

    def hlmlInit(self) -> None:
        self.calls.append(("hlmlInit", None))

    def hlmlDeviceGetHandleByPCIBusID(self, pci_addr: str) -> str:
        return self._maybe("hlmlDeviceGetHandleByPCIBusID", f"handle:{pci_addr}")

    def hlmlDeviceGetHandleByIndex(self, index: int) -> str:
        return self._maybe("hlmlDeviceGetHandleByIndex", f"handle:{index}")

    def hlmlDeviceGetPowerUsage(self, device: Any) -> int:
        return self._maybe("hlmlDeviceGetPowerUsage", self.power_mw)

    def hlmlDeviceGetTotalEnergyConsumption(self, device: Any) -> int:
        return self._maybe("hlmlDeviceGetTotalEnergyConsumption", self.energy_mj)

    def hlmlDeviceGetClockInfo(self, device: Any, clock_type: int = 0) -> int:
        return self._maybe("hlmlDeviceGetClockInfo", self.mme_mhz if clock_type == 2 else 1000)

    def hlmlDeviceGetMaxClockInfo(self, device: Any, clock_type: int = 0) -> int:
        return self._maybe("hlmlDeviceGetMaxClockInfo", 1800)

    def hlmlDeviceGetTemperature(self, device: Any, sensor_type: int) -> int:
        return self._maybe("hlmlDeviceGetTemperature", self.temp_c)

    def hlmlDeviceGetCurrentClocksThrottleReasons(self, device: Any) -> int:
        return self._maybe("hlmlDeviceGetCurrentClocksThrottleReasons", self.throttle_mask)

    def hlmlDeviceGetViolationStatus(self, device: Any, perf_policy: int) -> Any:
        return self._maybe("hlmlDeviceGetViolationStatus",
                           SimpleNamespace(reference_time=1_000_000, violation_time=250 * (perf_policy + 1)))

    def hlmlDeviceGetPowerManagementLimit(self, device: Any) -> int:
        return self._maybe("hlmlDeviceGetPowerManagementLimit", self.limit_mw)

    def hlmlDeviceGetName(self, device: Any) -> bytes:
        return self._maybe("hlmlDeviceGetName", b"HL-325L")

    def hlmlGetDriverVersion(self) -> bytes:
        return self._maybe("hlmlGetDriverVersion", b"1.24.2-481")
