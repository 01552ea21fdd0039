"""CPU: package energy from RAPL (/sys/class/powercap, uJ, wraps at max_energy_range_uj), the mean core
clock from /proc/cpuinfo, temperature from the thermal zones, the cpufreq governor. What is not readable is
said once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from xmfu.harness.machine.cpu_info import parse_cpuinfo
from xmfu.harness.machine.telemetry.base import Probe, Reading, probe_report, reading_from

POWERCAP = Path("/sys/class/powercap")
THERMAL = Path("/sys/class/thermal")
CPUFREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq")
NOT_EXPOSED = {"power_w": "RAPL gives energy only: power is the energy difference over the window",
               "mem_clock_mhz": "no memory clock in sysfs", "throttle": "no clock-limiting reasons in sysfs",
               "power_limit_w": "RAPL power limits are not read"}


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def rapl_reason(powercap: Path) -> str:
    """Why no RAPL package is readable: no powercap in sysfs, no intel-rapl package, or energy_uj readable by root
    only (the kernel commit "powercap: restrict energy meter to root access", CVE-2020-8694, Linux 5.10 and
    stable backports)."""
    if not powercap.is_dir():
        return f"{powercap} is not there (no powercap driver, or a container or VM without it)"
    found = sorted(powercap.glob("intel-rapl:[0-9]*/energy_uj"))
    if not found:
        return f"no intel-rapl:N/energy_uj under {powercap}"
    try:
        found[0].read_text()
    except PermissionError:
        return f"{found[0]}: permission denied (energy_uj is readable by root only since CVE-2020-8694)"
    except OSError as exc:
        return f"{found[0]}: {exc}"
    return "a RAPL energy_uj could not be read"


def mean_core_mhz(text: str) -> float | None:
    values = [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]
    return sum(values) / len(values) if values else None


def cpu_clocks(cpufreq: Path = CPUFREQ) -> dict[str, Any]:
    """{"locked", "detail", "source", "reason"} from cpu0's cpufreq: locked when scaling_min_freq equals
    scaling_max_freq, or under the `userspace` governor (a fixed scaling_setspeed; kernel cpufreq docs)."""
    try:
        governor = (cpufreq / "scaling_governor").read_text().strip()
    except OSError:
        return {"locked": None, "detail": {"governor": None}, "source": str(cpufreq),
                "reason": f"no cpufreq in sysfs here ({cpufreq})"}
    low, high = _read_int(cpufreq / "scaling_min_freq"), _read_int(cpufreq / "scaling_max_freq")
    locked = governor == "userspace" or (low is not None and low == high)
    return {"locked": locked, "detail": {"governor": governor, "scaling_min_freq_khz": low,
                                         "scaling_max_freq_khz": high},
            "source": str(cpufreq), "reason": None}


class CpuSampler:
    name = "cpu"
    available = True
    background = False  # read at both ends of the window only (see recorder.py)
    processes_reason = "no accelerator: other processes sharing the CPU are not tracked"

    def __init__(self, powercap: Path = POWERCAP, thermal: Path = THERMAL) -> None:
        self.packages = sorted(p for p in powercap.glob("intel-rapl:[0-9]*") if ":" not in p.name.split("rapl:")[1])
        self.packages = [p for p in self.packages if _read_int(p / "energy_uj") is not None]
        ranges = [_read_int(p / "max_energy_range_uj") for p in self.packages]
        self.energy_wrap_j = sum(r for r in ranges if r) / 1e6 if self.packages and all(ranges) else None
        self.rapl_reason = None if self.packages else rapl_reason(powercap)
        self.zones = [z for z in sorted(thermal.glob("thermal_zone*")) if _read_int(z / "temp") is not None]
        missing = [what for what, ok in (("RAPL energy", self.packages), ("temperature", self.zones)) if not ok]
        self.reason = "not readable here: " + ", ".join(missing) if missing else ""

    def _energy(self) -> Probe:
        if not self.packages:
            return Probe(source="RAPL", reason=f"no readable RAPL package: {self.rapl_reason}")
        values = [_read_int(p / "energy_uj") for p in self.packages]
        if any(v is None for v in values):
            return Probe(source="RAPL", reason="a RAPL energy_uj could not be read")
        return Probe(sum(values) / 1e6, "RAPL energy_uj")

    def _temperature(self) -> Probe:
        temps = [t / 1e3 for t in (_read_int(z / "temp") for z in self.zones) if t is not None]
        if not temps:
            return Probe(source="thermal zones", reason="no readable thermal zone in sysfs")
        return Probe(max(temps), "hottest thermal zone")

    def _fields(self) -> dict[str, Probe]:
        try:
            clock = Probe(mean_core_mhz(Path("/proc/cpuinfo").read_text()), "/proc/cpuinfo mean cpu MHz")
        except OSError as exc:
            clock = Probe(source="/proc/cpuinfo", reason=str(exc))
        out = {k: Probe(reason=why) for k, why in NOT_EXPOSED.items()}
        out.update(energy_j=self._energy(), sm_clock_mhz=clock, temp_c=self._temperature())
        return out

    def read(self) -> Reading:
        return reading_from(self._fields())

    def static(self) -> dict[str, Any]:
        info = parse_cpuinfo(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").exists() else {}
        return {"api": "sysfs", "rapl_packages": [p.name for p in self.packages], "thermal_zones": len(self.zones),
                "model": info.get("model name"), "unreadable": self.reason or None, "clocks": cpu_clocks()}

    def processes(self) -> list[dict[str, Any]] | None:
        return None

    def probe(self) -> dict[str, dict[str, Any]]:
        model = parse_cpuinfo(Path("/proc/cpuinfo").read_text()).get("model name") \
            if Path("/proc/cpuinfo").exists() else None
        identity = Probe({"resolved_by": "host", "model": model}, "/proc/cpuinfo")
        return probe_report(self._fields(), identity, cpu_clocks(), None, self.processes_reason, None)
