"""CPU: package energy from RAPL (/sys/class/powercap, µJ, wraps at max_energy_range_uj), the mean core
clock from /proc/cpuinfo, temperature from the thermal zones. What is not readable is said once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.machine.cpu_info import parse_cpuinfo
from harness.machine.telemetry.base import Reading

POWERCAP = Path("/sys/class/powercap")
THERMAL = Path("/sys/class/thermal")


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def mean_core_mhz(text: str) -> float | None:
    values = [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]
    return sum(values) / len(values) if values else None


class CpuSampler:
    name = "cpu"
    available = True
    background = False  # read at both ends of the window only (see recorder.py)

    def __init__(self, powercap: Path = POWERCAP, thermal: Path = THERMAL) -> None:
        self.packages = sorted(p for p in powercap.glob("intel-rapl:[0-9]*") if ":" not in p.name.split("rapl:")[1])
        self.packages = [p for p in self.packages if _read_int(p / "energy_uj") is not None]
        ranges = [_read_int(p / "max_energy_range_uj") for p in self.packages]
        self.energy_wrap_j = sum(r for r in ranges if r) / 1e6 if self.packages and all(ranges) else None
        self.zones = [z for z in sorted(thermal.glob("thermal_zone*")) if _read_int(z / "temp") is not None]
        missing = [what for what, ok in (("RAPL energy", self.packages), ("temperature", self.zones)) if not ok]
        self.reason = "not readable here: " + ", ".join(missing) if missing else ""

    def read(self) -> Reading:
        energy = None
        if self.packages:
            values = [_read_int(p / "energy_uj") for p in self.packages]
            energy = sum(values) / 1e6 if all(v is not None for v in values) else None
        temps = [_read_int(z / "temp") for z in self.zones]
        temps = [t / 1e3 for t in temps if t is not None]
        try:
            clock = mean_core_mhz(Path("/proc/cpuinfo").read_text())
        except OSError:
            clock = None
        return Reading(t=time.perf_counter(), energy_j=energy, sm_clock_mhz=clock,
                       temp_c=max(temps) if temps else None)

    def static(self) -> dict[str, Any]:
        info = parse_cpuinfo(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").exists() else {}
        return {"api": "sysfs", "rapl_packages": [p.name for p in self.packages], "thermal_zones": len(self.zones),
                "model": info.get("model name"), "unreadable": self.reason or None}
