"""NVIDIA through NVML (package nvidia-ml-py, module pynvml). Units: NVML power is mW, energy mJ.

API facts from nvidia-ml-py 12.560.30 pynvml.py (the same names in 13.615.71) and nvml.h:
- nvmlDeviceGetPowerUsage "on Ampere (except GA100) or newer GPUs returns power averaged over 1 sec";
  NVML_FI_DEV_POWER_INSTANT (field 186) is the current power. nvmlDeviceGetFieldValues(handle, [ids]) returns
  c_nvmlFieldValue_t entries whose own `nvmlReturn` says whether that field was read and whose `valueType`
  names the c_nvmlValue_t member holding it. Both power readings are in mW (nvml.h gives mW for the
  neighbouring power fields 187-190; field 186 states no unit).
- A failing call raises an NVMLError subclass (NVMLError_NotSupported, ...); each field is read on its own.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.telemetry.base import Probe, Reading, probe_report, reading_from, unreadable
from xmfu.harness.machine.telemetry.identity import nvml_handle

# nvmlDeviceGetCurrentClocksEventReasons bits (nvml.h: nvmlClocksEventReason*)
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                 0x100: "display_clocks"}
APPLICATIONS_CLOCKS_BIT = 0x2  # nvmlClocksEventReasonApplicationsClocksSetting (alias ...UserDefinedClocks)
POWER_INSTANT, POWER_USAGE = "NVML_FI_DEV_POWER_INSTANT", "nvmlDeviceGetPowerUsage"
FI_DEV_POWER_INSTANT = 186  # pynvml NVML_FI_DEV_POWER_INSTANT
# pynvml NVML_VALUE_TYPE_* -> the c_nvmlValue_t member (usVal exists from nvidia-ml-py 13 on)
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
POWER_NOTES = {POWER_INSTANT: "instantaneous board power (nvmlDeviceGetFieldValues, NVML_FI_DEV_POWER_INSTANT)",
               POWER_USAGE: "nvmlDeviceGetPowerUsage: a 1 s average on Ampere (except GA100) and newer, "
                            "instantaneous on older parts; the instantaneous field is not readable here"}
# nvidia-ml-py 12.560.30 pynvml.py has nvmlDeviceSetGpuLockedClocks / nvmlDeviceResetGpuLockedClocks (and the
# memory pair) and no getter for the locked range; NVML's "Device Commands" page lists only the set/reset calls, and
# nvmlDeviceGetClock's clock ids are CURRENT, APP_CLOCK_TARGET, APP_CLOCK_DEFAULT and CUSTOMER_BOOST_MAX. So no
# NVML query reports an -lgc lock; whether one raises the applications-clocks event reason on Hopper and
# Blackwell is unverified. NVML's v575->v580 change log deprecates the applications-clocks APIs ("will be removed
# in CUDA 14.0"), so on newer drivers only the event reason may answer.
LOCK_NOTE = ("no NVML query reports GPU clocks locked with nvidia-smi -lgc (nvmlDeviceSetGpuLockedClocks has no "
             "getter in nvidia-ml-py 12.560.30); such a lock is seen only if it raises the applications_clocks "
             "event reason, which is unverified on Hopper and Blackwell")
APP_CLOCKS_QUERY = "nvmlDeviceGetApplicationsClock vs nvmlDeviceGetDefaultApplicationsClock"


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def field_value(entry: Any) -> tuple[float | None, str | None]:
    """(value, None) from one c_nvmlFieldValue_t, or (None, why)."""
    if entry.nvmlReturn != 0:
        return None, f"nvmlReturn {entry.nvmlReturn}"
    member = VALUE_MEMBERS.get(entry.valueType)
    if member is None or not hasattr(entry.value, member):
        return None, f"unknown valueType {entry.valueType}"
    return float(getattr(entry.value, member)), None


class NvmlSampler:
    name = "nvml"
    available = True
    background = True  # sampled by a thread during the window
    energy_wrap_j = None  # 64-bit mJ counter: no wrap in practice

    def __init__(self, device: DeviceInfo, nvml: Any = None) -> None:
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        nvml.nvmlInit()
        self.handle, self.identity = nvml_handle(nvml, device)
        instant = self._instant_power()
        self._instant, self._instant_why = instant.value is not None, instant.reason  # else: the 1 s average
        self.processes_reason: str | None = None
        said = [f"identity: {self.identity['warning']}"] if self.identity["warning"] else []
        self.reason = "; ".join(s for s in [*said, unreadable(self._fields())] if s)

    def _get(self, fn_name: str, *args: Any, scale: float = 1.0) -> Probe:
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return Probe(source=fn_name, reason=f"{fn_name} is not in this nvidia-ml-py")
        try:
            value = fn(self.handle, *args)
        except Exception as exc:  # NVMLError_NotSupported on some parts / in some containers
            return Probe(source=fn_name, reason=f"{fn_name}: {type(exc).__name__}: {exc}")
        return Probe(value * scale if scale != 1.0 else value, fn_name)

    def _instant_power(self) -> Probe:
        got = self._get("nvmlDeviceGetFieldValues", [FI_DEV_POWER_INSTANT])
        if got.value is None:
            return Probe(source=POWER_INSTANT, reason=got.reason)
        entry = got.value[0]
        milliwatts, why = field_value(entry)
        if entry.nvmlReturn != 0:
            with contextlib.suppress(Exception):  # NVMLError(code) names the code ("Not Supported")
                why = f"{why} ({self.nvml.NVMLError(entry.nvmlReturn)})"
        return Probe(milliwatts / 1e3 if milliwatts is not None else None, POWER_INSTANT, why)

    def _power(self) -> Probe:
        if self._instant:
            instant = self._instant_power()
            if instant.value is not None:
                return instant
        return self._get(POWER_USAGE, scale=1e-3)

    def _throttle(self) -> Probe:
        """The clocks event reasons. NVML 12.x renamed ...ThrottleReasons to ...EventReasons: an older
        nvidia-ml-py lacks the new name, an older driver the new symbol (NVMLError_FunctionNotFound)."""
        first = None
        for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            got = self._get(fn)
            if got.value is not None:
                return Probe(throttle_names(got.value), fn)
            first = first or got
        return Probe(source=first.source, reason=first.reason)

    def _fields(self) -> dict[str, Probe]:
        n = self.nvml
        return {"power_w": self._power(), "energy_j": self._get("nvmlDeviceGetTotalEnergyConsumption", scale=1e-3),
                "sm_clock_mhz": self._get("nvmlDeviceGetClockInfo", n.NVML_CLOCK_SM),
                "mem_clock_mhz": self._get("nvmlDeviceGetClockInfo", n.NVML_CLOCK_MEM),
                "temp_c": self._get("nvmlDeviceGetTemperature", n.NVML_TEMPERATURE_GPU),
                "throttle": self._throttle(),
                "power_limit_w": self._get("nvmlDeviceGetEnforcedPowerLimit", scale=1e-3)}

    def read(self) -> Reading:
        return reading_from(self._fields())

    def clocks(self) -> dict[str, Any]:
        """{"locked": True | False | None, "detail": {...}, "source", "reason"}: applications clocks against
        their defaults (nvmlDeviceGetApplicationsClock / nvmlDeviceGetDefaultApplicationsClock) and the
        applications-clocks event reason."""
        n, detail, differ = self.nvml, {}, []
        for label, clock in (("sm", n.NVML_CLOCK_SM), ("mem", n.NVML_CLOCK_MEM)):
            app = self._get("nvmlDeviceGetApplicationsClock", clock)
            default = self._get("nvmlDeviceGetDefaultApplicationsClock", clock)
            detail[f"applications_{label}_mhz"], detail[f"default_applications_{label}_mhz"] = app.value, default.value
            if app.value is not None and default.value is not None:
                differ.append(app.value != default.value)
        throttle = self._throttle()
        event = "applications_clocks" in throttle.value if throttle.value is not None else None
        detail.update(applications_clocks_event_reason=event, gpu_locked_clocks=None, note=LOCK_NOTE)
        locked = True if any(differ) or event else (False if differ or event is False else None)
        reason = None if locked is not None else "neither applications clocks nor event reasons are readable"
        return {"locked": locked, "detail": detail, "source": self._lock_source(any(differ), event, bool(differ)),
                "reason": reason}

    @staticmethod
    def _lock_source(differ: bool, event: bool | None, app_read: bool) -> str | None:
        """The query that decided `locked`: the one that saw a lock, else every one that was read."""
        reason_query = "nvmlDeviceGetCurrentClocksEventReasons applications_clocks"
        if differ:
            return APP_CLOCKS_QUERY
        if event:
            return reason_query
        read = [q for q, ok in ((APP_CLOCKS_QUERY, app_read), (reason_query, event is not None)) if ok]
        return " and ".join(read) or None

    def _process_name(self, pid: int) -> str | None:
        try:
            return str(self.nvml.nvmlSystemGetProcessName(pid)) or None
        except Exception:  # NVMLError_NotFound / _NoPermission: another container's or user's process
            return None

    def processes(self) -> list[dict[str, Any]] | None:
        """Compute and graphics processes on this GPU (nvmlDeviceGet{Compute,Graphics}RunningProcesses).
        PIDs are the host's ("the nvidia-driver itself does not support pid-namespaces", NVIDIA/nvidia-docker#1483):
        inside a container with its own PID namespace `is_self` can miss our own process, and contention.assess
        then records the list as not attributable."""
        found: dict[int, dict[str, Any]] = {}
        failed = []
        for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                         ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
            got = self._get(fn)
            if got.value is None:
                failed.append(got.reason)
                continue
            for proc in got.value:
                entry = found.setdefault(int(proc.pid), {
                    "pid": int(proc.pid), "used_memory_bytes": proc.usedGpuMemory, "name": None, "kinds": [],
                    "is_self": int(proc.pid) == os.getpid()})
                entry["kinds"].append(kind)
        self.processes_reason = "; ".join(failed) or None
        if len(failed) == 2:
            return None
        for entry in found.values():
            entry["name"] = self._process_name(entry["pid"])
        return list(found.values())

    def static(self) -> dict[str, Any]:
        n = self.nvml
        driver = None
        with contextlib.suppress(Exception):  # recorded as None; environment.json has its own driver query
            driver = n.nvmlSystemGetDriverVersion()
        power = POWER_INSTANT if self._instant else POWER_USAGE
        return {"api": "nvml", "driver": driver.decode() if isinstance(driver, bytes) else driver,
                "power_limit_w": self._get("nvmlDeviceGetEnforcedPowerLimit", scale=1e-3).value,
                "max_sm_clock_mhz": self._get("nvmlDeviceGetMaxClockInfo", n.NVML_CLOCK_SM).value,
                "max_mem_clock_mhz": self._get("nvmlDeviceGetMaxClockInfo", n.NVML_CLOCK_MEM).value,
                "identity": self.identity,
                "power_source": {"reading": power, "note": POWER_NOTES[power], "instant_unreadable": self._instant_why},
                "energy_source": "nvmlDeviceGetTotalEnergyConsumption (mJ since the driver loaded)",
                "clocks": self.clocks()}

    def probe(self) -> dict[str, dict[str, Any]]:
        identity = Probe(self.identity, self.identity["resolved_by"], self.identity["warning"])
        procs = self.processes()
        return probe_report(self._fields(), identity, self.clocks(), procs, self.processes_reason,
                            "nvmlDeviceGetComputeRunningProcesses + nvmlDeviceGetGraphicsRunningProcesses")
