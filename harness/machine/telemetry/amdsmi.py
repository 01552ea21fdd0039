"""AMD through amdsmi (needs ROCm's libamd_smi.so; importing it without ROCm raises, which becomes
`telemetry unavailable`). Units: power W, power cap uW, energy = accumulator x resolution uJ, clocks MHz.

Return shapes differ between releases (amdsmi py-interface/amdsmi_interface.py at rocm-6.1.0 / rocm-6.2.0,
PyPI amdsmi 6.3.0 / 7.0.2), so every field is read on its own and by whichever key the release has:
- amdsmi_get_energy_count: the accumulator is 'power' at 6.1/6.2, 'power' and 'energy_accumulator' at 6.3,
  'energy_accumulator' only at 7.0; 'counter_resolution' is in uJ.
- amdsmi_get_clock_info: 'cur_clk' at 6.1, 'clk' (and 'clk_locked') from 6.2.
- "N/A" strings: amdsmi_get_power_info turns 0xFFFF into "N/A" from 6.2 (6.1 returns the raw 0xFFFF);
  gpu_metrics 'throttle_status' is a bool or "N/A"; from 7.0 amdsmi_get_clock_info says "N/A" for an all-ones
  value. Both the string and the raw sentinel are read as unknown (None), never as a value or "not throttled".
- amdsmi_get_violation_status (from ROCm 6.3, MI300 and later): reads gpu_metrics twice 100 ms apart
  (kFASTEST_POLL_TIME_MS in src/amd_smi/amd_smi.cc), so each reading on such a part takes 100 ms longer; its
  active_* flags are bools or "N/A".
"""

from __future__ import annotations

import os
from typing import Any

from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.telemetry.base import Probe, Reading, probe_report, reading_from, unreadable
from xmfu.harness.machine.telemetry.identity import amdsmi_handle

U8_NA, U16_NA, U32_NA, U64_NA = 0xFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF  # amdsmi's MaxUIntegerTypes ("N/A")
# gpu_metrics throttle keys -> the name a reading gives them while active
METRICS_THROTTLE = {"throttle_status": "throttled", "indep_throttle_status": "indep_throttled"}
# amdsmi_get_violation_status active_* flags (amdsmi_violation_status_t in include/amd_smi/amdsmi.h: PVIOL is the
# Package Power Tracking limit, TVIOL the socket thermal limit); gfx_clk_below_host_limit is in later releases
VIOLATIONS = {"active_ppt_pwr": "ppt_power", "active_socket_thrm": "socket_thermal",
              "active_prochot_thrm": "prochot_thermal", "active_vr_thrm": "vr_thermal",
              "active_hbm_thrm": "hbm_thermal", "active_gfx_clk_below_host_limit": "gfx_clk_below_host_limit"}
POWER_KEYS = ("current_socket_power", "average_socket_power")  # a part may fill only one of the two
POWER_NOTES = {"current_socket_power": "amdsmi_get_power_info current_socket_power (W)",
               "average_socket_power": "amdsmi_get_power_info average_socket_power (W), averaged by the "
                                       "firmware over an interval amdsmi does not state"}
ENERGY_SOURCES = {"energy_accumulator": "amdsmi_get_energy_count energy_accumulator",
                  "power": "amdsmi_get_energy_count power (the accumulator before ROCm 6.3)"}


def known(value: Any, sentinels: tuple[int, ...] = ()) -> tuple[float | None, str | None]:
    """(number, None), or (None, why) for "N/A", a missing key, a sentinel or anything not a number."""
    if value is None:
        return None, "missing"
    if isinstance(value, str):
        return None, f'"{value}"'
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"not a number: {value!r}"
    if value in sentinels:
        return None, f"{int(value):#x} (amdsmi's N/A)"
    return float(value), None


def _flat(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"  # AmdSmiLibraryException's text has \n\t


class AmdSmiSampler:
    name = "amdsmi"
    available = True
    background = True  # sampled by a thread during the window
    energy_wrap_j = None  # 64-bit accumulator

    def __init__(self, device: DeviceInfo, amdsmi: Any = None) -> None:
        if amdsmi is None:
            import amdsmi
        self.smi = amdsmi
        amdsmi.amdsmi_init()
        self.handle, self.identity = amdsmi_handle(amdsmi, device)
        self.processes_reason: str | None = None
        fields = self._fields()
        self._power_source = fields["power_w"].source if fields["power_w"].value is not None else None
        said = [f"identity: {self.identity['warning']}"] if self.identity["warning"] else []
        self.reason = "; ".join(s for s in [*said, unreadable(fields)] if s)

    def _call(self, fn_name: str, *args: Any) -> Probe:
        fn = getattr(self.smi, fn_name, None)
        if fn is None:
            return Probe(source=fn_name, reason=f"{fn_name} is not in this amdsmi")
        try:
            return Probe(fn(self.handle, *args), fn_name)
        except Exception as exc:  # AmdSmiLibraryException: not supported (VM guests, older parts), no permission
            return Probe(source=fn_name, reason=f"{fn_name}: {_flat(exc)}")

    @staticmethod
    def _first(got: Probe, keys: tuple[str, ...], scale: float = 1.0, sentinels: tuple[int, ...] = ()) -> Probe:
        """The first of `keys` in a dict answer that holds a number."""
        if not isinstance(got.value, dict):
            return Probe(source=got.source, reason=got.reason or f"{got.source} gave {got.value!r}")
        why = []
        for key in keys:
            value, bad = known(got.value.get(key), sentinels)
            if value is not None:
                return Probe(value * scale, f"{got.source} {key}")
            why.append(f"{key} {bad}")
        return Probe(source=got.source, reason=f"{got.source}: " + ", ".join(why))

    def _energy(self) -> Probe:
        got = self._call("amdsmi_get_energy_count")
        counter = self._first(got, ("energy_accumulator", "power"))
        resolution = self._first(got, ("counter_resolution",))
        if counter.value is None or resolution.value is None:
            return Probe(source=got.source, reason=counter.reason or resolution.reason)
        key = counter.source.rsplit(" ", 1)[1]
        return Probe(counter.value * resolution.value / 1e6, ENERGY_SOURCES[key])

    def _clock(self, kind: Any) -> Probe:
        return self._first(self._call("amdsmi_get_clock_info", kind), ("clk", "cur_clk"), sentinels=(U32_NA,))

    def _temperature(self) -> Probe:
        s = self.smi
        got = self._call("amdsmi_get_temp_metric", s.AmdSmiTemperatureType.HOTSPOT, s.AmdSmiTemperatureMetric.CURRENT)
        if got.reason:
            return got
        value, bad = known(got.value)
        return Probe(value, got.source, bad and f"{got.source} gave {bad}")

    def _metrics_throttle(self) -> tuple[list[str], list[str], list[str]]:
        """(active names, keys read, why not) from gpu_metrics throttle_status and indep_throttle_status."""
        got = self._call("amdsmi_get_gpu_metrics_info")
        if not isinstance(got.value, dict):
            return [], [], [got.reason or f"{got.source} gave {got.value!r}"]
        active, read, why = [], [], []
        for key, name in METRICS_THROTTLE.items():
            status = got.value.get(key)
            if isinstance(status, int) and status not in (U32_NA, U64_NA):  # a bool; an int kept for safety
                read.append(f"{got.source} {key}")
                active += [name] if status else []
            elif status is not None or key == "throttle_status":  # indep_: absent from some releases' dicts
                why.append(f"{key} is {known(status)[1]}")
        return active, read, why

    def _violations(self) -> tuple[list[str], list[str], list[str]]:
        """(active names, keys read, why not) from amdsmi_get_violation_status's active_* flags (ROCm 6.3+,
        "Only available for MI300+ ASICs": amdsmi CHANGELOG.md for ROCm 6.3.0)."""
        got = self._call("amdsmi_get_violation_status")
        if not isinstance(got.value, dict):
            return [], [], [got.reason or f"{got.source} gave {got.value!r}"]
        active, read = [], []
        for key, name in VIOLATIONS.items():
            flag = got.value.get(key)
            if isinstance(flag, bool):  # "N/A" where the part does not report it, absent in older releases
                read.append(key)
                active += [name] if flag else []
        if not read:
            return [], [], [f"{got.source}: no active_* flag readable"]
        return active, [f"{got.source} " + ",".join(read)], []

    def _throttle(self) -> Probe:
        """Active clock limiters from every source this amdsmi and part answer: gpu_metrics' throttle_status
        and indep_throttle_status (each a bool in the Python API: the bitmask is reduced by
        _validate_if_max_uint(..., isBool=True), amdsmi_interface.py at rocm-6.1.0..7.x) and the violation
        status' active_* flags, which say which limit (PPT power, socket thermal, HBM thermal...) holds the clock.
        None only where no source answers; a source that fails is named in the reason."""
        m_active, m_read, m_why = self._metrics_throttle()
        v_active, v_read, v_why = self._violations()
        read = m_read + v_read
        if not read:
            return Probe(source="amdsmi_get_gpu_metrics_info", reason="; ".join(m_why + v_why))
        return Probe(sorted(set(m_active + v_active)), "; ".join(read), "; ".join(m_why + v_why) or None)

    def _fields(self) -> dict[str, Probe]:
        s = self.smi
        return {"power_w": self._first(self._call("amdsmi_get_power_info"), POWER_KEYS, sentinels=(U16_NA,)),
                "energy_j": self._energy(), "sm_clock_mhz": self._clock(s.AmdSmiClkType.GFX),
                "mem_clock_mhz": self._clock(s.AmdSmiClkType.MEM), "temp_c": self._temperature(),
                "throttle": self._throttle(),
                "power_limit_w": self._first(self._call("amdsmi_get_power_cap_info"), ("power_cap",), scale=1e-6)}

    def read(self) -> Reading:
        return reading_from(self._fields())

    def clocks(self) -> dict[str, Any]:
        """{"locked", "detail", "source", "reason"}: amdsmi_get_gpu_perf_level (AUTO: not locked; MANUAL, HIGH,
        LOW, STABLE_*, DETERMINISM: fixed by someone) and, from 6.2, amdsmi_get_clock_info(GFX)['clk_locked']."""
        perf = self._call("amdsmi_get_gpu_perf_level")
        level = perf.value if isinstance(perf.value, str) else None
        by_level = None if level is None or level.endswith("_UNKNOWN") else not level.endswith("_AUTO")
        gfx = self._call("amdsmi_get_clock_info", self.smi.AmdSmiClkType.GFX)
        flag = gfx.value.get("clk_locked") if isinstance(gfx.value, dict) else None
        clk_locked = bool(flag) if isinstance(flag, int) and flag != U8_NA else None
        locked = True if by_level or clk_locked else (False if False in (by_level, clk_locked) else None)
        reason = None if locked is not None else "; ".join(r for r in (perf.reason, gfx.reason) if r) or \
            "perf level unknown and no clk_locked in this amdsmi"
        return {"locked": locked, "detail": {"perf_level": level, "gfx_clk_locked": clk_locked},
                "source": "amdsmi_get_gpu_perf_level, amdsmi_get_clock_info clk_locked", "reason": reason}

    def _describe(self, item: Any) -> dict[str, Any] | None:
        """One process: a dict from 6.2 on; at 6.1 a handle for amdsmi_get_gpu_process_info."""
        info = item if isinstance(item, dict) else self._call("amdsmi_get_gpu_process_info", item).value
        if not isinstance(info, dict) or "pid" not in info:
            return None
        usage = info.get("memory_usage") if isinstance(info.get("memory_usage"), dict) else {}
        memory, _ = known(usage.get("vram_mem", info.get("mem")))
        name = info.get("name")
        return {"pid": int(info["pid"]), "used_memory_bytes": int(memory) if memory is not None else None,
                "name": name if isinstance(name, str) and name not in ("", "N/A") else None,
                "kinds": ["compute"], "is_self": int(info["pid"]) == os.getpid()}

    def processes(self) -> list[dict[str, Any]] | None:
        """The compute (KFD) processes on this GPU (amdsmi_get_gpu_process_list: amdgpu_get_compute_process_list
        in src/amd_smi/amd_smi.cc at rocm-6.2.0), with their VRAM in bytes."""
        got = self._call("amdsmi_get_gpu_process_list")
        if got.value is None:
            self.processes_reason = got.reason
            return None
        described = [self._describe(item) for item in got.value]
        missing = described.count(None)
        self.processes_reason = f"{missing} process(es) could not be described" if missing else None
        return [d for d in described if d is not None]

    def static(self) -> dict[str, Any]:
        s = self.smi
        driver = self._call("amdsmi_get_gpu_driver_info").value or {}
        version = driver.get("driver_version")
        gfx = self._first(self._call("amdsmi_get_clock_info", s.AmdSmiClkType.GFX), ("max_clk",), sentinels=(U32_NA,))
        power = (self._power_source or "").rsplit(" ", 1)[-1]
        return {"api": "amdsmi", "driver": version if version not in (None, "", "N/A") else None,
                "power_limit_w": self._first(self._call("amdsmi_get_power_cap_info"), ("power_cap",), 1e-6).value,
                "max_sm_clock_mhz": gfx.value, "identity": self.identity,
                "power_source": {"reading": self._power_source, "note": POWER_NOTES.get(power)},
                "energy_source": self._energy().source, "clocks": self.clocks()}

    def probe(self) -> dict[str, dict[str, Any]]:
        identity = Probe(self.identity, self.identity["resolved_by"], self.identity["warning"])
        procs = self.processes()
        return probe_report(self._fields(), identity, self.clocks(), procs, self.processes_reason,
                            "amdsmi_get_gpu_process_list")
