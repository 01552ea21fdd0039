"""Intel GPUs (platform kind "xpu"): the CSV rows `xpu-smi dump` streams on stdout, and `xpu-smi discovery -d <dev>
-j` for the driver and firmware versions.

Why xpu-smi and not Level Zero Sysman directly. Sysman (oneapi-src/level-zero, the zes* API: zesPowerGetEnergyCounter,
zesFrequencyGetState with its throttleReasons, zesTemperatureGetState) is what xpu-smi itself calls. Its one Python
binding is `pyzes` (PyPI 0.1.3, Intel, "Development Status :: 4 - Beta", read from its wheel): a ctypes wrapper that
loads libze_intel_gpu.so and leaves the caller to allocate every zes_* struct, with no recorded outputs to test
against, so a fake of it would only test xmfu's own guesses. XPU Manager's `xpu-smi` (intel/xpumanager) ships with
Intel's data-center GPU stack, documents its output with recorded examples, and streams one CSV row per sample, the
shape neuron.py already follows for neuron-monitor.

What was read (github.com/intel/xpumanager): the 1.x line at tag v1.3.7 (57e44f5) and 980fe92e (1.2.37): `doc/
smi_user_guide.md` (dump, discovery), `cli/src/comlet_dump.cpp` (how a row is printed), `core/src/api/
internal_dump_raw_data.cpp` (column names and scales), `core/include/xpum_structs.h` (units), `cli/src/core_stub/
statistics_stub.cpp` (counters print their accumulated value); the 2.x redesign at tag v2.0.0 (33afa12):
`ial/cmn/cmd_dump.cpp`, `ial/cmn/metrics/*.cpp`, `utility/table/table_builder.h`. Facts used:
- `xpu-smi dump -d <id or PCI BDF> -m <ids> -i 1` prints a header, then a row per interval, cells joined by ", "
  (1.x pads values to four characters; 2.x is CSV when stdout is not a terminal). -i is whole seconds, at least 1
  (1.x: "integer larger than or equal to 1"); sub-second sampling needs --file, which 1.x stops at once when stdin is
  not a terminal (waitForEsc), so xmfu reads the 1 s stream.
- The legacy metric ids xmfu asks for mean the same in 1.x and 2.x (2.x LEGACY_METRIC_NAMES): 0 utilisation (%),
  1 power (W), 2 GPU frequency (MHz), 3 core temperature (C), 5 memory utilisation (%), 8 energy (J), 18 memory used
  (MiB), 35 throttle reason. The header names differ by version (1.2.37 "GPU Utilization (%)", 1.3.7 "Average %
  utilization of all GPU Engines", 2.x "utilization.gpu (%)"), so columns are found by name, never by position.
- Energy: xpu-smi keeps the counter in mJ ("Energy, unit mJ", XPUM_STATS_ENERGY) and prints its accumulated value
  / 1000 as J: a cumulative counter, only differences mean anything. 2.x: "Cumulative GPU-domain energy", while its
  power.draw is card-domain, so mean power from the counter covers the GPU domain only there.
- Memory used: bytes / 1048576, printed as MiB. A value xpu-smi cannot read prints as "N/A" (both lines).
- Throttle reasons: the Level Zero zes_freq_throttle_reason_flags_t bits, printed by 1.x as text joined by " | "
  ("Not Throttled" for none) and by 2.x as short names joined by "," ("None" for none); xmfu names each by its
  flag, ZES_FREQ_THROTTLE_REASON_FLAG_<X> lower-cased.
- `discovery -d <id> -j` keys (1.x comlet_discovery.cpp and 2.x cmd_discovery.cpp agree): device_name,
  pci_bdf_address, uuid, driver_version, kernel_version, gfx_firmware_version, gfx_data_firmware_version.
No memory clock and no power limit are in dump's metrics: those fields stay None and say so. xpu-smi numbers cards;
a torch device is found by its PCI address where the framework gave one, else by its ordinal, with a warning (with
Level Zero's FLAT hierarchy torch numbers tiles, so an ordinal may name another card).
None of this has run on an Intel GPU: it is tested on Intel's recorded outputs (tests/machine/xpu_smi_recorded/).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.telemetry.base import Probe, Reading, probe_report, unreadable

COMMAND = ("xpu-smi",)
METRICS = "0,1,2,3,5,8,18,35"  # legacy ids, the same meaning in 1.x and 2.x (see the docstring)
INTERVAL_S = 1  # dump's smallest stdout interval
FIRST_ROW_TIMEOUT_S = 5.0  # the first row comes one interval after the start
STALE_S = 3.5 * INTERVAL_S  # a latest row older than this is not "now": the stream has stalled
DISCOVERY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 2.0

# Column name (1.2.37, 1.3.7, 2.x) -> (field, factor to xmfu's unit).
COLUMNS: dict[str, tuple[str, float]] = {
    "GPU Power (W)": ("power_w", 1.0), "power.draw (W)": ("power_w", 1.0),
    "GPU Energy Consumed (J)": ("energy_j", 1.0), "energy.consumed (J)": ("energy_j", 1.0),
    "GPU Frequency (MHz)": ("sm_clock_mhz", 1.0), "clocks.current.graphics (MHz)": ("sm_clock_mhz", 1.0),
    "GPU Core Temperature (Celsius Degree)": ("temp_c", 1.0), "temperature.gpu (C)": ("temp_c", 1.0),
    "GPU Utilization (%)": ("utilization_pct", 1.0), "utilization.gpu (%)": ("utilization_pct", 1.0),
    "Average % utilization of all GPU Engines": ("utilization_pct", 1.0),
    "GPU Memory Utilization (%)": ("memory_utilization_pct", 1.0),
    "utilization.memory (%)": ("memory_utilization_pct", 1.0),
    "GPU Memory Used (MiB)": ("memory_used_bytes", 2.0**20), "memory.used (MiB)": ("memory_used_bytes", 2.0**20),
}
THROTTLE_COLUMNS = ("Throttle reason", "clocks.throttle.reason")
# Printed reason -> the Level Zero flag it stands for (1.x comlet_dump.cpp; 2.x metrics/clock.cpp).
THROTTLE_NAMES = {
    "Average Power Excursion": "ave_pwr_cap", "Burst Power Excursion": "burst_pwr_cap",
    "Current Excursion": "current_limit", "Thermal Excursion": "thermal_limit", "Power Supply Assertion": "psu_alert",
    "Software Supplied Frequency Range": "sw_range", "Sub Block that has a Lower Frequency": "hw_range",
    "Thermal": "thermal_limit", "Power": "ave_pwr_cap", "PowerBurst": "burst_pwr_cap", "Current": "current_limit",
    "SW": "sw_range", "HW": "hw_range", "Voltage": "voltage", "ThermalAlert": "thermal", "PowerAlert": "power",
}
NO_THROTTLE = ("Not Throttled", "None")
NOT_IN_DUMP = {"mem_clock_mhz": "xpu-smi dump has no memory-clock metric",
               "power_limit_w": "xpu-smi dump has no power-limit metric"}
READING_COLUMNS = ("power_w", "energy_j", "sm_clock_mhz", "temp_c", "throttle")


def throttle_reasons(cell: str) -> list[str]:
    """'Thermal Excursion | Current Excursion' (1.x) or 'Thermal,Power' (2.x) -> Level Zero flag names."""
    if cell in NO_THROTTLE:
        return []
    parts = [p.strip() for p in cell.replace(" | ", ",").split(",") if p.strip()]
    return [THROTTLE_NAMES.get(p, f"unknown: {p}") for p in parts]


def parse_row(header: list[str], line: str) -> dict[str, Any]:
    """One dump row by its header's names; ValueError when the cells do not fit the header."""
    cells = [c.strip() for c in line.rstrip("\r\n").split(", ")]
    if len(cells) != len(header):
        raise ValueError(f"{len(cells)} cells under a {len(header)}-column header")
    row: dict[str, Any] = {"tool_time": cells[0], "columns": {}}
    for name, cell in zip(header, cells, strict=True):
        if name in THROTTLE_COLUMNS:
            row["throttle"] = None if cell == "N/A" else throttle_reasons(cell)
        elif name in COLUMNS:
            field, factor = COLUMNS[name]
            row[field] = None if cell == "N/A" else float(cell) * factor  # float() raises on a garbled cell
        else:
            continue
        row["columns"][row_field(name)] = name
    return row


def row_field(name: str) -> str:
    return "throttle" if name in THROTTLE_COLUMNS else COLUMNS[name][0]


class DumpParser:
    """Feeds on the stream line by line: messages before the header, then rows; a row that does not parse (or a
    last line cut off without its newline) is skipped and counted in `malformed`."""

    def __init__(self, keep: int = 3600) -> None:
        self.header: list[str] | None = None
        self.latest: dict[str, Any] | None = None
        self.rows: deque[dict[str, Any]] = deque(maxlen=keep)
        self.malformed = 0
        self.messages: deque[str] = deque(maxlen=20)  # warnings and errors the tool printed, last first out

    def feed(self, line: str, t: float) -> dict[str, Any] | None:
        text = line.rstrip("\r\n")
        if not text.strip():
            return None
        if text.startswith("Timestamp"):
            self.header = [c.strip() for c in text.split(", ")]
            return None
        if self.header is None or text.startswith(("Error", "Warning", "WARNING")):
            self.messages.append(text.strip())
            return None
        try:
            if not line.endswith("\n"):
                raise ValueError("line cut off")
            row = parse_row(self.header, text)
        except ValueError:
            self.malformed += 1
            return None
        row["t"] = t
        self.latest = row
        self.rows.append(row)
        return row


def parse_dump(text: str) -> DumpParser:
    parser = DumpParser()
    for line in text.splitlines(keepends=True):
        parser.feed(line, 0.0)
    return parser


def parse_discovery(text: str) -> dict[str, Any]:
    """`xpu-smi discovery -d <dev> -j`: the device's name, address, driver and firmware; `discovery -j` (the list)
    gives its first device's name and address."""
    doc = json.loads(text)
    if "device_list" in doc:
        doc = (doc["device_list"] or [{}])[0]
    keys = ("device_id", "device_name", "pci_bdf_address", "uuid", "driver_version", "kernel_version",
            "gfx_firmware_version", "gfx_data_firmware_version")
    return {k: doc.get(k) for k in keys}


def device_target(device: DeviceInfo) -> tuple[str, dict[str, Any]]:
    """What `-d` gets: the PCI address where the framework gave one, else the ordinal, with a warning."""
    if device.pci_bus_id:
        bdf = device.pci_bus_id.lower()
        return bdf, {"resolved_by": "pci_bus_id", "id": bdf, "warning": None}
    return str(device.index), {"resolved_by": "ordinal", "id": device.index, "warning": (
        "no PCI address from the framework: xpu-smi numbers cards, and torch under Level Zero's FLAT hierarchy "
        "numbers tiles, so this ordinal may be another card")}


def _stop(proc: Any) -> None:
    """Terminate, wait a bounded time, kill if still there."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


class XpuSmiSampler:
    """Keeps the latest `xpu-smi dump` row (a reader thread over its stdout). Read at both ends of a case: the
    stream's rows come once a second, so a background reader at the recorder's rate would repeat them."""

    name = "xpu-smi"
    available = True
    background = False
    energy_wrap_j = None  # not documented by xpu-smi
    processes_reason = "xpu-smi ps is not read by xmfu"

    def __init__(self, device: DeviceInfo, command: tuple[str, ...] = COMMAND,
                 popen: Callable[..., Any] = subprocess.Popen, run: Callable[..., Any] = subprocess.run,
                 first_row_timeout_s: float = FIRST_ROW_TIMEOUT_S) -> None:
        self.target, self.identity = device_target(device)
        self.parser = DumpParser()
        # FileNotFoundError here (no xpu-smi on PATH) reaches open_sampler, which records it
        self._proc = popen([*command, "dump", "-d", self.target, "-m", METRICS, "-i", str(INTERVAL_S)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
        self._finalizer = weakref.finalize(self, _stop, self._proc)  # never outlives xmfu, even if not closed
        self._thread = threading.Thread(target=self._follow, name="xmfu-xpu-smi", daemon=True)
        self._thread.start()
        self.discovery = self._discover(command, run)
        if not self.wait_for_row(first_row_timeout_s):
            why = self._no_row(first_row_timeout_s)
            self.close()
            raise RuntimeError(why)
        said = [f"identity: {self.identity['warning']}"] if self.identity["warning"] else []
        self.reason = "; ".join(s for s in [*said, unreadable(self._fields())] if s)

    def _follow(self) -> None:
        for line in self._proc.stdout:
            self.parser.feed(line, time.perf_counter())

    def _discover(self, command: tuple[str, ...], run: Callable[..., Any]) -> dict[str, Any]:
        argv = [*command, "discovery", "-d", self.target, "-j"]
        try:
            done = run(argv, capture_output=True, text=True, timeout=DISCOVERY_TIMEOUT_S, stdin=subprocess.DEVNULL)
            return parse_discovery(done.stdout)
        except (OSError, subprocess.SubprocessError, ValueError, AttributeError) as exc:
            return {"reason": f"{' '.join(argv)}: {type(exc).__name__}: {exc}"}

    def wait_for_row(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.parser.latest is None and time.monotonic() < deadline and self._proc.poll() is None:
            time.sleep(0.01)
        self._thread.join(timeout=0.2 if self._proc.poll() is not None else 0)  # the last lines of an exit
        return self.parser.latest is not None

    def _no_row(self, waited_s: float) -> str:
        said = "; ".join(self.parser.messages) or "nothing"
        if self._proc.poll() is not None:
            return f"xpu-smi dump exited with status {self._proc.returncode} before a row; it said: {said}"
        return f"no xpu-smi dump row within {waited_s:g} s; it said: {said}"

    def _latest(self) -> dict[str, Any]:
        row = self.parser.latest
        if row is None:
            raise RuntimeError(self._no_row(0))
        if self._proc.poll() is not None:
            raise RuntimeError(f"xpu-smi dump ended (status {self._proc.returncode}): "
                               f"{'; '.join(self.parser.messages) or 'no message'}")
        age = time.perf_counter() - row["t"]
        if age > STALE_S:
            raise RuntimeError(f"the latest xpu-smi dump row is {age:.1f} s old: the stream has stalled")
        return row

    def _fields(self) -> dict[str, Probe]:
        row = self.parser.latest or {}
        out = {k: Probe(source="xpu-smi dump", reason=why) for k, why in NOT_IN_DUMP.items()}
        for field in READING_COLUMNS:
            column = (row.get("columns") or {}).get(field)
            if column is None:
                out[field] = Probe(source="xpu-smi dump", reason="not among this xpu-smi's dump columns")
            elif row.get(field) is None:
                out[field] = Probe(source=f"xpu-smi dump: {column}", reason="xpu-smi printed N/A")
            else:
                out[field] = Probe(row[field], f"xpu-smi dump: {column}")
        return out

    def read(self) -> Reading:
        row = self._latest()
        power = (row.get("columns") or {}).get("power_w")
        return Reading(t=row["t"], power_w=row.get("power_w"), energy_j=row.get("energy_j"),
                       sm_clock_mhz=row.get("sm_clock_mhz"), temp_c=row.get("temp_c"), throttle=row.get("throttle"),
                       power_source=f"xpu-smi dump: {power}" if row.get("power_w") is not None else None)

    def counters(self) -> dict[str, Any]:
        """Utilisation, memory utilisation and memory used from the latest row, and the rows skipped."""
        row = self.parser.latest or {}
        return {"utilization_pct": row.get("utilization_pct"), "memory_utilization_pct":
                row.get("memory_utilization_pct"), "memory_used_bytes": row.get("memory_used_bytes"),
                "tool_time": row.get("tool_time"), "malformed_rows": self.parser.malformed}

    def clocks(self) -> dict[str, Any]:
        return {"locked": None, "detail": {}, "source": None, "reason": "xpu-smi dump reports no clock lock"}

    def static(self) -> dict[str, Any]:
        return {"api": "xpu-smi", "device": self.discovery, "identity": self.identity, "header": self.parser.header,
                "counters": self.counters(), "unreadable": self.reason, "clocks": self.clocks()}

    def processes(self) -> list[dict[str, Any]] | None:
        return None

    def close(self) -> None:
        self._finalizer()  # _stop once: terminate, bounded wait, kill
        self._thread.join(timeout=STOP_TIMEOUT_S)

    def probe(self) -> dict[str, dict[str, Any]]:
        identity = Probe({**self.identity, **self.discovery}, "xpu-smi discovery -d " + self.target + " -j")
        return probe_report(self._fields(), identity, self.clocks(), None, self.processes_reason, None)
