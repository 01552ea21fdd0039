"""A fake `pynvml` with the real module's names, argument orders, return types and errors, over made-up GPUs.

Copies nvidia-ml-py 12.560.30 pynvml.py; every name used here is the same in nvidia-ml-py 13.615.71 (its
c_nvmlValue_t only adds `usVal`, NVML_VALUE_TYPE_UNSIGNED_SHORT = 6). What is copied:

- errors: `NVMLError(code)` returns the subclass for the code (`NVMLError_NotSupported` for 3, ...), `.value`
  is the code, str() the message; the subclasses are named as `_extractNVMLErrorsAsClasses` names them.
- strings come back as `str` (the `convertStrBytes` wrapper decodes), except struct fields: `nvmlPciInfo_t.busId`
  is `bytes`, as ctypes gives char arrays.
- nvmlDeviceGetFieldValues(handle, fieldIds) returns a ctypes array of c_nvmlFieldValue_t (fieldId, scopeId,
  timestamp, latencyUsec, valueType, nvmlReturn, value: c_nvmlValue_t union); a field the device lacks has
  nvmlReturn != NVML_SUCCESS while the call itself succeeds.
- nvmlDeviceGet{Compute,Graphics}RunningProcesses return objects with pid, usedGpuMemory (None where NVML says
  not available), gpuInstanceId, computeInstanceId (nvmlStructToFriendlyObject of c_nvmlProcessInfo_v2_t).
- handle lookups: nvmlDeviceGetHandleByUUID wants the full "GPU-..." (or "MIG-...") string and raises NotFound
  for an unknown one; nvmlDeviceGetHandleByPciBusId (which calls nvmlDeviceGetHandleByPciBusId_v2) accepts
  "%x:%x:%x.%x", "%x:%x:%x" and "%x:%x.%x" (nvml.h).

Units as NVML's: power and power limits mW, energy mJ, clocks MHz, temperature C, memory bytes.
"""

from __future__ import annotations

import re
from ctypes import (
    Structure,
    Union,
    c_char,
    c_double,
    c_int,
    c_int64,
    c_longlong,
    c_uint,
    c_uint32,
    c_ulong,
    c_ulonglong,
)
from dataclasses import dataclass, field
from typing import Any, ClassVar

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
_MESSAGES = {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
             6: "Not Found", 13: "Function Not Found", 15: "GPU is lost", 999: "Unknown Error"}

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_CLOCK_VIDEO = 0, 1, 2, 3
NVML_CLOCK_ID_CURRENT, NVML_CLOCK_ID_APP_CLOCK_TARGET, NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 0, 1, 2
NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_VALUE_TYPE_DOUBLE, NVML_VALUE_TYPE_UNSIGNED_INT, NVML_VALUE_TYPE_UNSIGNED_LONG = 0, 1, 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_LONG_LONG, NVML_VALUE_TYPE_SIGNED_INT = 3, 4, 5
nvmlClocksEventReasonApplicationsClocksSetting = 0x2


class NVMLError(Exception):
    _valClassMapping: ClassVar[dict[int, type]] = {}

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int | None = None) -> None:
        super().__init__(self.value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, code: int) -> type:
    cls = type(name, (NVMLError,), {"__new__": lambda c, *a: NVMLError.__new__(c, code)})
    NVMLError._valClassMapping[code] = cls
    return cls


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _error_class("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)


class c_nvmlValue_t(Union):
    _fields_ = [("dVal", c_double), ("uiVal", c_uint), ("ulVal", c_ulong), ("ullVal", c_ulonglong),
                ("sllVal", c_longlong), ("siVal", c_int)]


class c_nvmlFieldValue_t(Structure):
    _fields_ = [("fieldId", c_uint32), ("scopeId", c_uint32), ("timestamp", c_int64), ("latencyUsec", c_int64),
                ("valueType", c_uint), ("nvmlReturn", c_uint), ("value", c_nvmlValue_t)]


class nvmlPciInfo_t(Structure):
    _fields_ = [("busIdLegacy", c_char * 16), ("domain", c_uint), ("bus", c_uint), ("device", c_uint),
                ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint), ("busId", c_char * 32)]


class nvmlFriendlyObject:
    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


@dataclass
class FakeGpu:
    """One physical GPU as NVML sees it. `errors` maps a pynvml function name to the NVML error code that
    function raises on this GPU (NVML_ERROR_NOT_SUPPORTED on parts/containers without it)."""

    uuid: str = "GPU-5a1b2c00-0001-0203-0405-060708090a0b"
    pci: tuple[int, int, int, int] = (0, 0x18, 0, 0)  # domain, bus, device, function
    serial: str = "1650123456789"
    power_mw: int = 650_000  # nvmlDeviceGetPowerUsage
    instant_mw: int | None = 662_000  # NVML_FI_DEV_POWER_INSTANT; None: the field is not supported
    instant_type: int = NVML_VALUE_TYPE_UNSIGNED_INT
    energy_mj: int = 1_000_000
    sm_mhz: int = 1755
    mem_mhz: int = 2619
    max_sm_mhz: int = 1980
    max_mem_mhz: int = 2619
    temp_c: int = 61
    reasons: int = 0x4 | 0x20
    limit_mw: int = 700_000
    app_clocks: dict[int, int] = field(default_factory=lambda: {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619})
    default_app_clocks: dict[int, int] = field(default_factory=lambda: {NVML_CLOCK_SM: 1980, NVML_CLOCK_MEM: 2619})
    compute: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, usedGpuMemory)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def bus_id(self) -> str:
        d, b, dev, f = self.pci
        return f"{d:08X}:{b:02X}:{dev:02X}.{f}"  # the form nvmlPciInfo_t.busId has


class Handle:
    """An opaque device handle (pynvml's c_nvmlDevice_t)."""

    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu


def _parse_bus_id(text: str) -> tuple[int, int, int, int] | None:
    for pattern in (r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)",
                    r"([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)", r"([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-9a-fA-F]+)"):
        m = re.fullmatch(pattern, text)
        if m:
            n = [int(g, 16) for g in m.groups()]
            if pattern.endswith(r"\.([0-9a-fA-F]+)") and len(n) == 3:  # bus:device.function, domain 0
                return 0, n[0], n[1], n[2]
            return (n[0], n[1], n[2], n[3] if len(n) == 4 else 0)
    return None


class FakePynvml:
    """Stands in for the `pynvml` module: `FakePynvml([FakeGpu(...), ...])`, GPUs in NVML index order."""

    def __init__(self, gpus: list[FakeGpu], driver: str = "570.86.15", names: dict[int, str] | None = None,
                 missing: tuple[str, ...] = ()) -> None:
        self.gpus, self.driver, self.names = gpus, driver, names or {}
        self.calls: list[str] = []
        for name, value in globals().items():
            if name.startswith(("NVML_", "NVMLError", "nvmlClocks")) or name == "NVMLError":
                setattr(self, name, value)
        for name in missing:  # an older nvidia-ml-py without this function
            setattr(self, name, None)

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if value is None and name.startswith("nvml"):
            raise AttributeError(name)
        return value

    def _check(self, handle: Handle, fn: str) -> FakeGpu:
        self.calls.append(fn)
        code = handle.gpu.errors.get(fn)
        if code is not None:
            raise NVMLError(code)
        return handle.gpu

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        if pid not in self.names:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return self.names[pid]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        self.calls.append(f"nvmlDeviceGetHandleByIndex({index})")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return Handle(self.gpus[index])

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Handle:
        self.calls.append(f"nvmlDeviceGetHandleByUUID({uuid})")
        if not uuid.startswith(("GPU-", "MIG-")):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return Handle(gpu)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str) -> Handle:
        self.calls.append(f"nvmlDeviceGetHandleByPciBusId({pciBusId})")
        wanted = _parse_bus_id(pciBusId)
        if wanted is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        for gpu in self.gpus:
            if gpu.pci == wanted:
                return Handle(gpu)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        return self._check(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetSerial(self, handle: Handle) -> str:
        return self._check(handle, "nvmlDeviceGetSerial").serial

    def nvmlDeviceGetPciInfo(self, handle: Handle) -> nvmlPciInfo_t:
        gpu = self._check(handle, "nvmlDeviceGetPciInfo")
        info = nvmlPciInfo_t()
        info.domain, info.bus, info.device = gpu.pci[:3]
        info.busId = gpu.bus_id.encode()
        info.busIdLegacy = gpu.bus_id[4:].encode()
        return info

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        return self._check(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetFieldValues(self, handle: Handle, fieldIds: list[int]) -> Any:
        gpu = self._check(handle, "nvmlDeviceGetFieldValues")
        values = (c_nvmlFieldValue_t * len(fieldIds))()
        for slot, fid in zip(values, fieldIds, strict=True):
            slot.fieldId = fid
            if fid == NVML_FI_DEV_POWER_INSTANT and gpu.instant_mw is not None:
                slot.valueType, slot.nvmlReturn = gpu.instant_type, NVML_SUCCESS
                member = {NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal", NVML_VALUE_TYPE_SIGNED_INT: "siVal",
                          NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal", NVML_VALUE_TYPE_DOUBLE: "dVal"}
                setattr(slot.value, member[gpu.instant_type], gpu.instant_mw)
            else:
                slot.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Handle) -> int:
        return self._check(handle, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetClockInfo(self, handle: Handle, type: int) -> int:
        gpu = self._check(handle, "nvmlDeviceGetClockInfo")
        return gpu.sm_mhz if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS) else gpu.mem_mhz

    def nvmlDeviceGetMaxClockInfo(self, handle: Handle, type: int) -> int:
        gpu = self._check(handle, "nvmlDeviceGetMaxClockInfo")
        return gpu.max_sm_mhz if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS) else gpu.max_mem_mhz

    def nvmlDeviceGetApplicationsClock(self, handle: Handle, type: int) -> int:
        return self._check(handle, "nvmlDeviceGetApplicationsClock").app_clocks[type]

    def nvmlDeviceGetDefaultApplicationsClock(self, handle: Handle, type: int) -> int:
        return self._check(handle, "nvmlDeviceGetDefaultApplicationsClock").default_app_clocks[type]

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        return self._check(handle, "nvmlDeviceGetTemperature").temp_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Handle) -> int:
        return self._check(handle, "nvmlDeviceGetCurrentClocksEventReasons").reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Handle) -> int:
        return self._check(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").reasons

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Handle) -> int:
        return self._check(handle, "nvmlDeviceGetEnforcedPowerLimit").limit_mw

    def _processes(self, pairs: list[tuple[int, int | None]]) -> list[nvmlFriendlyObject]:
        return [nvmlFriendlyObject({"pid": pid, "usedGpuMemory": mem, "gpuInstanceId": 0xFFFFFFFF,
                                    "computeInstanceId": 0xFFFFFFFF}) for pid, mem in pairs]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[nvmlFriendlyObject]:
        return self._processes(self._check(handle, "nvmlDeviceGetComputeRunningProcesses").compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Handle) -> list[nvmlFriendlyObject]:
        return self._processes(self._check(handle, "nvmlDeviceGetGraphicsRunningProcesses").graphics)


def four_gpus(**common: Any) -> list[FakeGpu]:
    """An HGX-style board: GPUs 0-3 on buses 18, 2a, 3a, 5d, UUIDs matching tests/fakes/torch_cuda_props.uuid_for."""
    buses = (0x18, 0x2A, 0x3A, 0x5D)
    return [FakeGpu(uuid=f"GPU-5a1b2c{n:02x}-0001-0203-0405-060708090a0b", pci=(0, bus, 0, 0),
                    serial=f"16501234567{n:02d}", sm_mhz=1700 + n, **common) for n, bus in enumerate(buses)]
