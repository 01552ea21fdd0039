"""Intel Gaudi through HLML (package habana-pyhlml, module pyhlml). Units: HLML power is mW, energy mJ.

API facts from habana-pyhlml 1.24.2.481 (pyhlml/main.py, pyhlml_types_generated.py):
- hlmlInit() loads libhlml; without the driver library it prints "Failed to load libhlml" and raises
  HLMLError_Uninitialized ("HLML Error with code 1"), which open_sampler records as the reason.
- hlmlDeviceGetPowerUsage "in mW"; hlmlDeviceGetTotalEnergyConsumption "in mJ since last driver reload";
  hlmlDeviceGetPowerManagementLimit "in mW"; hlmlDeviceGetClockInfo(device, clock_type) "(MHz)", clock types
  HLML_CLOCK_SOC=0, IC=1, MME=2, TPC=3; hlmlDeviceGetTemperature(device, sensor) Celsius, HLML_TEMPERATURE_ON_AIP=0;
  hlmlDeviceGetCurrentClocksThrottleReasons bits HLML_CLOCKS_THROTTLE_REASON_POWER=1<<0, THERMAL=1<<1;
  hlmlDeviceGetViolationStatus(device, perf_policy) with HLML_PERF_POLICY_POWER / _THERMAL.
- A failing call raises an HLMLError subclass: each field is read on its own.
The matrix engine (MME) clock stands in the `sm_clock_mhz` column: it is the clock the matmul peak depends on.
"""

from __future__ import annotations

from typing import Any

from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.telemetry.base import Probe, Reading, probe_report, reading_from, unreadable

CLOCK_SOC, CLOCK_MME = 0, 2  # HLML_CLOCK_TYPE
TEMPERATURE_ON_AIP = 0  # HLML_TEMPERATURE_SENSORS
THROTTLE_BITS = {1 << 0: "power", 1 << 1: "thermal"}  # HLML_CLOCKS_THROTTLE_REASON_*
PERF_POLICY_POWER, PERF_POLICY_THERMAL = 0, 1  # HLML_PERF_POLICY_TYPE


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value  # pyhlml's name and version calls give bytes


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


class HlmlSampler:
    name = "hlml"
    available = True
    background = True
    energy_wrap_j = None  # c_ulonglong mJ counter

    def __init__(self, device: DeviceInfo, hlml: Any = None) -> None:
        if hlml is None:
            import pyhlml as hlml
        self.hlml = hlml
        hlml.hlmlInit()
        if device.pci_bus_id:
            self.handle = hlml.hlmlDeviceGetHandleByPCIBusID(device.pci_bus_id)
            self.identity = {"resolved_by": "pci_bus_id", "id": device.pci_bus_id, "warning": None}
        else:
            self.handle = hlml.hlmlDeviceGetHandleByIndex(device.index)
            self.identity = {"resolved_by": "ordinal", "id": device.index,
                             "warning": "no PCI bus id from the framework: HLML's ordinal may be another card"}
        self.processes_reason: str | None = "HLML process listing is not read by xmfu"
        said = [f"identity: {self.identity['warning']}"] if self.identity["warning"] else []
        self.reason = "; ".join(s for s in [*said, unreadable(self._fields())] if s)

    def _get(self, fn_name: str, *args: Any, scale: float = 1.0) -> Probe:
        fn = getattr(self.hlml, fn_name, None)
        if fn is None:
            return Probe(source=fn_name, reason=f"{fn_name} is not in this habana-pyhlml")
        try:
            value = fn(self.handle, *args)
        except Exception as exc:  # HLMLError_NotSupported and friends
            return Probe(source=fn_name, reason=f"{fn_name}: {type(exc).__name__}: {exc}")
        return Probe(value * scale if scale != 1.0 else value, fn_name)

    def _throttle(self) -> Probe:
        got = self._get("hlmlDeviceGetCurrentClocksThrottleReasons")
        return Probe(throttle_names(got.value), got.source) if got.value is not None else got

    def _fields(self) -> dict[str, Probe]:
        return {"power_w": self._get("hlmlDeviceGetPowerUsage", scale=1e-3),
                "energy_j": self._get("hlmlDeviceGetTotalEnergyConsumption", scale=1e-3),
                "sm_clock_mhz": self._get("hlmlDeviceGetClockInfo", CLOCK_MME),
                "mem_clock_mhz": Probe(source="hlmlDeviceGetClockInfo", reason="HLML has no memory clock type"),
                "temp_c": self._get("hlmlDeviceGetTemperature", TEMPERATURE_ON_AIP),
                "throttle": self._throttle(),
                "power_limit_w": self._get("hlmlDeviceGetPowerManagementLimit", scale=1e-3)}

    def read(self) -> Reading:
        return reading_from(self._fields())

    def violations(self) -> dict[str, Any]:
        """Time spent held back by the power and thermal policies (hlmlDeviceGetViolationStatus), as HLML gives
        it (c_hlml_violation_time), or the reason it could not be read."""
        out: dict[str, Any] = {}
        for label, policy in (("power", PERF_POLICY_POWER), ("thermal", PERF_POLICY_THERMAL)):
            got = self._get("hlmlDeviceGetViolationStatus", policy)
            value = got.value
            out[label] = ({"reference_time": getattr(value, "reference_time", None),
                           "violation_time": getattr(value, "violation_time", None)}
                          if value is not None else {"reason": got.reason})
        return out

    def clocks(self) -> dict[str, Any]:
        return {"locked": None, "detail": {}, "source": None, "reason": "HLML reports no clock lock"}

    def static(self) -> dict[str, Any]:
        name = self._get("hlmlDeviceGetName")
        try:
            driver = Probe(self.hlml.hlmlGetDriverVersion(), "hlmlGetDriverVersion")
        except Exception as exc:
            driver = Probe(source="hlmlGetDriverVersion", reason=f"{type(exc).__name__}: {exc}")
        return {"api": "hlml", "name": _text(name.value), "driver": _text(driver.value),
                "max_mme_clock_mhz": self._get("hlmlDeviceGetMaxClockInfo", CLOCK_MME).value,
                "power_limit_w": self._get("hlmlDeviceGetPowerManagementLimit", scale=1e-3).value,
                "violations": self.violations(), "identity": self.identity, "unreadable": self.reason,
                "clocks": self.clocks()}

    def processes(self) -> list[dict[str, Any]] | None:
        return None

    def probe(self) -> dict[str, dict[str, Any]]:
        identity = Probe(self.identity, "hlmlDeviceGetHandleBy" + (
            "PCIBusID" if self.identity["resolved_by"] == "pci_bus_id" else "Index"))
        return probe_report(self._fields(), identity, self.clocks(), None, self.processes_reason, None)
