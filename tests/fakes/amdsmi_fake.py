"""A fake `amdsmi` Python package per ROCm release, with the real return shapes, "N/A" strings and exceptions.

Copies amdsmi py-interface/amdsmi_interface.py as released at rocm-6.1.0, rocm-6.2.0 (the tags in ROCm/amdsmi,
identical to the PyPI sdists amdsmi 6.1.0 / 6.2.0 for these functions), amdsmi 6.3.0 and amdsmi 7.0.2 (PyPI
sdists). Where the shapes differ, `FakeAmdSmi(version=...)` returns the one that release returns:

- amdsmi_get_energy_count: {'power', 'counter_resolution', 'timestamp'} at 6.1/6.2 ('power' IS the energy
  accumulator); 6.3 adds 'energy_accumulator' ('power' "deprecating in 6.4"); 7.0 has no 'power'.
- amdsmi_get_power_info: W; 6.2+ turn a field equal to 0xFFFF into "N/A", 6.1 returns the raw 0xFFFF;
  7.0 adds 'socket_power'.
- amdsmi_get_clock_info: 6.1 {'cur_clk', 'max_clk', 'min_clk', 'sleep_clk'}; 6.2/6.3 {'clk', 'min_clk',
  'max_clk', 'clk_locked', 'clk_deep_sleep'} (raw ints); 7.0 same keys through `_validate_if_max_uint`, so an
  all-ones value is "N/A" and clk_locked a bool.
- amdsmi_get_gpu_metrics_info: throttle_status is a bool, or "N/A" (0xFFFFFFFF), in every release;
  indep_throttle_status likewise a bool or "N/A" (0xFFFFFFFFFFFFFFFF): the bitmask never reaches Python.
- amdsmi_get_violation_status (from 6.3; "Only available for MI300+ ASICs", AMDSMI_STATUS_NOT_SUPPORTED elsewhere):
  {'reference_timestamp', 'violation_timestamp', 'acc_counter', 'acc_*', 'per_*', 'active_prochot_thrm',
  'active_ppt_pwr', 'active_socket_thrm', 'active_vr_thrm', 'active_hbm_thrm'}, each active_* a bool or "N/A"
  (0xFF) (ROCm/amdsmi py-interface/amdsmi_interface.py at 0ceca28, the ROCm 6.3 interface).
- amdsmi_get_gpu_process_list: 6.1 returns process handles (ctypes.c_uint32) to pass to
  amdsmi_get_gpu_process_info; 6.2+ return dicts {'name' ("N/A" when empty), 'pid', 'mem', 'engine_usage',
  'memory_usage': {'gtt_mem', 'cpu_mem', 'vram_mem'}} (bytes), 7.0 adds 'cu_occupancy';
  amdsmi_get_gpu_process_info is gone from 6.2 on.
- amdsmi_get_gpu_driver_info: {'driver_name', 'driver_version', 'driver_date'}; 7.0 turns "" into "N/A".
- amdsmi_get_processor_handle_from_bdf(bdf): parses "dddd:bb:dd.f" or "bb:dd.f" (else AmdSmiBdfFormatException)
  and matches domain, bus, device and function exactly; no match is AMDSMI_STATUS_API_FAILED
  (src/amd_smi/amd_smi.cc at rocm-6.1.0).
- failures raise AmdSmiLibraryException(err_code) (AMDSMI_STATUS_NOT_SUPPORTED = 2, ...).
Units: power W, power cap uW, energy = accumulator x counter_resolution uJ, clocks MHz, temperature C.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

VERSIONS = ("6.1.0", "6.2.0", "6.3.0", "7.0.2")
AMDSMI_STATUS_INVAL, AMDSMI_STATUS_NOT_SUPPORTED, AMDSMI_STATUS_API_FAILED = 1, 2, 7
AMDSMI_STATUS_NO_PERM, AMDSMI_STATUS_NOT_FOUND = 10, 31
NA16, NA32, NA64 = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


class AmdSmiException(Exception):
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(abs(err_code))
        self.err_code = abs(err_code)
        self.err_info = {2: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
                         7: "AMDSMI_STATUS_API_FAILED - API call failed",
                         10: "AMDSMI_STATUS_NO_PERM - Permission Denied"}.get(self.err_code, "unknown")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiBdfFormatException(AmdSmiException):
    pass


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1


@dataclass
class FakeAmdGpu:
    """One GPU as amdsmi sees it; `errors` maps a function name to the amdsmi status it fails with."""

    bdf: tuple[int, int, int, int] = (0, 0x0C, 0, 0)
    uuid: str = "e4ff74a1-0000-1000-80d4-a1b2c3d4e5f6"  # amdsmi's own, generated from serial and device id
    asic_serial: str = "0xD4A1B2C3E5F60A0B"
    current_w: int = 540  # 0xFFFF: not reported ("N/A" from 6.2); a part may fill only one of the two
    average_w: int = NA16
    accumulator: int = 2_000_000
    resolution: float = 15.259
    gfx_mhz: int = 2100
    mem_mhz: int = 1300
    max_gfx_mhz: int = 2100
    gfx_locked: int = 0
    hotspot_c: int = 70
    throttle: int = 1  # 0xFFFFFFFF: "N/A"
    indep_throttle: int = 0  # 0xFFFFFFFFFFFFFFFF: "N/A"
    violations: dict[str, int] = field(default_factory=dict)  # active_* -> 1/0/0xFF; unnamed ones read 0
    cap_uw: int = 750_000_000
    perf_level: str = "AMDSMI_DEV_PERF_LEVEL_AUTO"
    driver_version: str = "6.8.5"
    processes: list[dict[str, Any]] = field(default_factory=list)  # name, pid, vram_mem
    errors: dict[str, int] = field(default_factory=dict)


class ProcessorHandle:
    """An opaque amdsmi_processor_handle."""

    def __init__(self, gpu: FakeAmdGpu) -> None:
        self.gpu = gpu


def _parse_bdf(text: str) -> list[int] | None:
    m = re.match(r"^([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])$", text)
    if m:
        return [int(x, 16) for x in m.groups()]
    m = re.match(r"^([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])$", text)
    return [0] + [int(x, 16) for x in m.groups()] if m else None


class FakeAmdSmi:
    """Stands in for the `amdsmi` package at one release: `FakeAmdSmi("6.2.0", [FakeAmdGpu(...), ...])`."""

    AmdSmiException, AmdSmiLibraryException = AmdSmiException, AmdSmiLibraryException
    AmdSmiBdfFormatException = AmdSmiBdfFormatException
    AmdSmiClkType, AmdSmiTemperatureType = AmdSmiClkType, AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric

    def __init__(self, version: str = "6.3.0", gpus: list[FakeAmdGpu] | None = None) -> None:
        assert version in VERSIONS, version
        self.version, self.gpus = version, gpus if gpus is not None else [FakeAmdGpu()]
        self.calls: list[str] = []
        if version != "6.1.0":
            self.amdsmi_get_gpu_process_info = None  # removed after 6.1
        if not self._at_least("6.3.0"):
            self.amdsmi_get_violation_status = None  # added in 6.3

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if value is None and name.startswith("amdsmi_"):
            raise AttributeError(name)
        return value

    def _at_least(self, version: str) -> bool:
        return VERSIONS.index(self.version) >= VERSIONS.index(version)

    def _gpu(self, handle: ProcessorHandle, fn: str) -> FakeAmdGpu:
        self.calls.append(fn)
        if fn in handle.gpu.errors:
            raise AmdSmiLibraryException(handle.gpu.errors[fn])
        return handle.gpu

    def amdsmi_init(self, flag: int = 0) -> None:
        self.calls.append("amdsmi_init")

    def amdsmi_get_processor_handles(self) -> list[ProcessorHandle]:
        return [ProcessorHandle(g) for g in self.gpus]

    def amdsmi_get_processor_handle_from_bdf(self, bdf: str) -> ProcessorHandle:
        self.calls.append(f"amdsmi_get_processor_handle_from_bdf({bdf})")
        parsed = _parse_bdf(bdf)
        if parsed is None:
            raise AmdSmiBdfFormatException(bdf)
        for gpu in self.gpus:
            if list(gpu.bdf) == parsed:
                return ProcessorHandle(gpu)
        raise AmdSmiLibraryException(AMDSMI_STATUS_API_FAILED)

    def amdsmi_get_gpu_device_bdf(self, handle: ProcessorHandle) -> str:
        d, b, dev, f = self._gpu(handle, "amdsmi_get_gpu_device_bdf").bdf
        return f"{d:04x}:{b:02x}:{dev:02x}.{f:x}"

    def amdsmi_get_gpu_device_uuid(self, handle: ProcessorHandle) -> str:
        return self._gpu(handle, "amdsmi_get_gpu_device_uuid").uuid

    def amdsmi_get_gpu_asic_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._gpu(handle, "amdsmi_get_gpu_asic_info")
        return {"market_name": "AMD Instinct MI300X", "vendor_id": "0x1002", "device_id": "0x74a1",
                "asic_serial": gpu.asic_serial}

    def amdsmi_get_energy_count(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._gpu(handle, "amdsmi_get_energy_count")
        out: dict[str, Any] = {"counter_resolution": gpu.resolution, "timestamp": 0}
        if not self._at_least("7.0.2"):
            out["power"] = gpu.accumulator
        if self._at_least("6.3.0"):
            out["energy_accumulator"] = gpu.accumulator
        return out

    def amdsmi_get_power_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._gpu(handle, "amdsmi_get_power_info")
        out: dict[str, Any] = {"current_socket_power": gpu.current_w, "average_socket_power": gpu.average_w,
                               "gfx_voltage": NA16, "soc_voltage": NA16, "mem_voltage": NA16, "power_limit": 750}
        if self._at_least("7.0.2"):
            out = {"socket_power": gpu.current_w, **out}
        if self._at_least("6.2.0"):
            out = {k: "N/A" if v == NA16 else v for k, v in out.items()}
        return out

    def amdsmi_get_power_cap_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        cap = self._gpu(handle, "amdsmi_get_power_cap_info").cap_uw
        return {"power_cap": cap, "default_power_cap": cap, "dpm_cap": 0, "min_power_cap": 0,
                "max_power_cap": cap}

    def amdsmi_get_clock_info(self, handle: ProcessorHandle, clock_type: AmdSmiClkType) -> dict[str, Any]:
        gpu = self._gpu(handle, "amdsmi_get_clock_info")
        clk, high = (gpu.gfx_mhz, gpu.max_gfx_mhz) if clock_type == AmdSmiClkType.GFX else (gpu.mem_mhz, gpu.mem_mhz)
        if not self._at_least("6.2.0"):
            return {"cur_clk": clk, "max_clk": high, "min_clk": 500, "sleep_clk": 0}
        out: dict[str, Any] = {"clk": clk, "min_clk": 500, "max_clk": high, "clk_locked": gpu.gfx_locked,
                               "clk_deep_sleep": 0}
        if self._at_least("7.0.2"):
            out = {k: "N/A" if v == NA32 else v for k, v in out.items()}
            out["clk_locked"] = "N/A" if gpu.gfx_locked == 0xFF else bool(gpu.gfx_locked)
        return out

    def amdsmi_get_temp_metric(self, handle: ProcessorHandle, sensor_type: AmdSmiTemperatureType,
                               metric: AmdSmiTemperatureMetric) -> int:
        return self._gpu(handle, "amdsmi_get_temp_metric").hotspot_c

    def amdsmi_get_gpu_metrics_info(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._gpu(handle, "amdsmi_get_gpu_metrics_info")
        return {"temperature_hotspot": gpu.hotspot_c, "current_socket_power": gpu.current_w,
                "average_socket_power": "N/A" if gpu.average_w == NA16 else gpu.average_w,
                "current_gfxclk": gpu.gfx_mhz, "throttle_status": "N/A" if gpu.throttle == NA32 else bool(gpu.throttle),
                "indep_throttle_status": "N/A" if gpu.indep_throttle == NA64 else bool(gpu.indep_throttle)}

    def amdsmi_get_violation_status(self, handle: ProcessorHandle) -> dict[str, Any]:
        gpu = self._gpu(handle, "amdsmi_get_violation_status")
        out: dict[str, Any] = {"reference_timestamp": 1_700_000_000_000_000, "violation_timestamp": 100,
                               "acc_counter": 1000}
        for name in ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm"):
            flag = gpu.violations.get(f"active_{name}", 0)
            out[f"acc_{name}"], out[f"per_{name}"] = 0, 0
            out[f"active_{name}"] = "N/A" if flag == 0xFF else bool(flag)
        return out

    def amdsmi_get_gpu_driver_info(self, handle: ProcessorHandle) -> dict[str, str]:
        gpu = self._gpu(handle, "amdsmi_get_gpu_driver_info")
        out = {"driver_name": "amdgpu", "driver_version": gpu.driver_version, "driver_date": "2015/01/01 00:00"}
        return {k: v or "N/A" for k, v in out.items()} if self._at_least("7.0.2") else out

    def amdsmi_get_gpu_perf_level(self, handle: ProcessorHandle) -> str:
        return self._gpu(handle, "amdsmi_get_gpu_perf_level").perf_level

    def _process_dict(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p.get("name", "")
        out = {"name": name if name or self.version == "6.1.0" else "N/A", "pid": p["pid"], "mem": p["vram_mem"],
               "engine_usage": {"gfx": 0, "enc": 0},
               "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": p["vram_mem"]}}
        if self._at_least("7.0.2"):
            out["cu_occupancy"] = "N/A"
        return out

    def amdsmi_get_gpu_process_list(self, handle: ProcessorHandle) -> list[Any]:
        gpu = self._gpu(handle, "amdsmi_get_gpu_process_list")
        if self.version == "6.1.0":
            return [ctypes.c_uint32(p["pid"]) for p in gpu.processes]
        return [self._process_dict(p) for p in gpu.processes]

    def amdsmi_get_gpu_process_info(self, handle: ProcessorHandle, process: ctypes.c_uint32) -> dict[str, Any]:
        gpu = self._gpu(handle, "amdsmi_get_gpu_process_info")
        found = next(p for p in gpu.processes if p["pid"] == process.value)
        return self._process_dict(found)


def eight_mi300x(version: str = "6.3.0") -> FakeAmdSmi:
    """An MI300X platform: GPUs on buses 0c, 22, 38, 5c, 9f, af, bf, df (amdsmi order)."""
    buses = (0x0C, 0x22, 0x38, 0x5C, 0x9F, 0xAF, 0xBF, 0xDF)
    return FakeAmdSmi(version, [FakeAmdGpu(bdf=(0, b, 0, 0), gfx_mhz=2000 + n, asic_serial=f"0xD4A1B2C3E5F60A{n:02X}")
                                for n, b in enumerate(buses)])
