"""Facts about the host CPU that its peak estimate needs: ISA flags, cores in use, clock, caches.

Read from Linux's /proc and /sys; anything unreadable is None with the reason kept, never guessed.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class CpuFacts:
    model: str
    vendor: str
    flags: tuple[str, ...]
    logical_cpus: int  # in this process's affinity mask
    threads_per_core: int
    physical_cores: int  # in use: affinity / SMT, capped by the cgroup CPU quota
    clock_ghz: float | None
    clock_source: str  # which clock was assumed and where it came from
    memory_bytes: int | None
    llc_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read(path: Path | str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def parse_cpuinfo(text: str) -> dict[str, str]:
    """First processor block of /proc/cpuinfo as a dict (x86 `flags`, aarch64 `Features`)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def parse_size(text: str) -> int | None:
    """'32768K' or '32M' (sysfs cache sizes) to bytes."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else None


def cgroup_cpu_limit(text: str | None) -> float | None:
    """cgroup v2 `cpu.max` ("quota period" or "max period") as a number of CPUs."""
    if not text:
        return None
    quota, _, period = text.strip().partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _clock() -> tuple[float | None, str]:
    # Prefer the base (sustained, guaranteed) frequency; then the max boost; then what /proc reports now.
    for name, label in (("base_frequency", "base frequency"), ("cpuinfo_max_freq", "max boost frequency")):
        text = _read(SYS_CPU / "cpu0" / "cpufreq" / name)
        if text and text.strip().isdigit():
            return int(text) / 1e6, f"{label} from sysfs cpufreq/{name}"
    info = parse_cpuinfo(_read("/proc/cpuinfo") or "")
    if "cpu MHz" in info:
        return float(info["cpu MHz"]) / 1e3, (
            "'cpu MHz' from /proc/cpuinfo (no cpufreq in sysfs: often the nominal clock; turbo may run above it)"
        )
    return None, "no clock readable (set cpu_clock_ghz=...)"


def _llc_bytes() -> int | None:
    sizes = []
    for index in sorted((SYS_CPU / "cpu0" / "cache").glob("index*")):
        text = _read(index / "size")
        if text and (size := parse_size(text)):
            sizes.append(size)
    return max(sizes) if sizes else None


def _threads_per_core() -> int:
    text = _read(SYS_CPU / "cpu0" / "topology" / "thread_siblings_list") or "0"
    count = 0
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        count += int(hi) - int(lo) + 1 if hi else 1
    return max(count, 1)


def read_cpu_facts() -> CpuFacts:
    info = parse_cpuinfo(_read("/proc/cpuinfo") or "")
    flags = tuple(sorted((info.get("flags") or info.get("Features") or "").split()))
    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    tpc = _threads_per_core()
    cores = max(logical // tpc, 1)
    quota = cgroup_cpu_limit(_read("/sys/fs/cgroup/cpu.max"))
    if quota is not None:
        cores = max(min(cores, int(quota)), 1)
    clock, source = _clock()
    meminfo = _read("/proc/meminfo") or ""
    mem_kib = next((int(line.split()[1]) for line in meminfo.splitlines() if line.startswith("MemTotal:")), None)
    return CpuFacts(
        model=info.get("model name") or platform.processor() or platform.machine(),
        vendor=info.get("vendor_id") or info.get("CPU implementer") or "unknown",
        flags=flags, logical_cpus=logical, threads_per_core=tpc, physical_cores=cores,
        clock_ghz=clock, clock_source=source, memory_bytes=mem_kib * 1024 if mem_kib else None,
        llc_bytes=_llc_bytes(),
    )
