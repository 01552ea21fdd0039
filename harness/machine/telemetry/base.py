"""The reading every sampler returns, in fixed units, the sampler interface, and the probe record.

Every field is read on its own: a query that fails or answers "N/A" loses that field only, as None, and
`probe()` says why. None always means "not known", never zero or "nothing active".
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Protocol

READING_FIELDS = ("power_w", "energy_j", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "throttle", "power_limit_w")
# What `probe()` answers for: each Reading field, then where power comes from, which device was found and how,
# whether clocks are locked, and the other processes on the device.
PROBE_KEYS = (*READING_FIELDS, "power_source", "identity", "clocks", "processes")


@dataclass
class Reading:
    t: float  # time.perf_counter() of the reading, the clock the timers use
    power_w: float | None = None
    energy_j: float | None = None  # a cumulative counter: only differences mean anything
    sm_clock_mhz: float | None = None  # SM (NVIDIA), GFX (AMD), mean core clock (CPU)
    mem_clock_mhz: float | None = None
    temp_c: float | None = None
    throttle: list[str] | None = None  # active clock-limiting reasons; None: not readable (not "none active")
    power_limit_w: float | None = None
    power_source: str | None = None  # the query power_w came from (instantaneous or averaged differ)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Probe:
    """One field as read now: its value, the query that gave it, or why there is no value."""

    value: Any = None
    source: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "reason": self.reason}


def reading_from(fields: dict[str, Probe]) -> Reading:
    values = {k: fields[k].value for k in READING_FIELDS if k in fields}
    power = fields.get("power_w", Probe())
    source = power.source if power.value is not None else None
    return Reading(t=time.perf_counter(), power_source=source, **values)


def probe_report(fields: dict[str, Probe], identity: Probe, clocks: dict[str, Any],
                 processes: list[dict[str, Any]] | None, processes_reason: str | None,
                 processes_source: str | None) -> dict[str, dict[str, Any]]:
    """The `probe()` answer: every PROBE_KEYS entry as {"value", "source", "reason"}."""
    out = {k: fields.get(k, Probe(reason="not read by this sampler")).as_dict() for k in READING_FIELDS}
    power = fields.get("power_w", Probe())
    out["power_source"] = Probe(power.source if power.value is not None else None, power.source,
                                power.reason).as_dict()
    out["identity"] = identity.as_dict()
    out["clocks"] = Probe(clocks, clocks.get("source"), clocks.get("reason")).as_dict()
    out["processes"] = Probe(processes, processes_source, processes_reason).as_dict()
    return out


def unreadable(probes: dict[str, Probe]) -> str:
    """'not readable here: energy_j (why), ...' for the fields without a value, '' when all have one."""
    missing = [f"{k} ({p.reason})" for k, p in probes.items() if p.value is None]
    return "not readable here: " + ", ".join(missing) if missing else ""


class Sampler(Protocol):
    name: str
    available: bool
    reason: str  # why not available, or what is not readable
    energy_wrap_j: float | None  # the energy counter's range where it wraps around
    background: bool  # True: a thread samples during the window; False: one reading at each end
    processes_reason: str | None  # why the last processes() returned None, or what part of it failed

    def read(self) -> Reading: ...

    def static(self) -> dict[str, Any]:
        """Facts that do not change during a run: power limit, maximum clocks, driver, identity, clocks."""
        ...

    def probe(self) -> dict[str, dict[str, Any]]:
        """Each of PROBE_KEYS: {"value": what is read now, "source": the query, "reason": why no value}."""
        ...

    def processes(self) -> list[dict[str, Any]] | None:
        """Processes on the measured device: [{"pid", "used_memory_bytes", "name", "kinds", "is_self"}], or
        None when the list cannot be read (`processes_reason` says why)."""
        ...


class Unavailable:
    name = "unavailable"
    available = False
    background = False
    energy_wrap_j = None

    def __init__(self, reason: str) -> None:
        self.reason = f"telemetry unavailable: {reason}"
        self.processes_reason: str | None = self.reason

    def read(self) -> Reading:
        raise RuntimeError(self.reason)

    def static(self) -> dict[str, Any]:
        return {"reason": self.reason}

    def probe(self) -> dict[str, dict[str, Any]]:
        return {k: Probe(reason=self.reason).as_dict() for k in PROBE_KEYS}

    def processes(self) -> list[dict[str, Any]] | None:
        return None
