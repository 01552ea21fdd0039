"""The reading every sampler returns, in fixed units, and the sampler interface."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass
class Reading:
    t: float  # time.perf_counter() of the reading, the clock the timers use
    power_w: float | None = None
    energy_j: float | None = None  # a cumulative counter: only differences mean anything
    sm_clock_mhz: float | None = None  # SM (NVIDIA), GFX (AMD), mean core clock (CPU)
    mem_clock_mhz: float | None = None
    temp_c: float | None = None
    throttle: list[str] = field(default_factory=list)  # active clock-limiting reasons
    power_limit_w: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sampler(Protocol):
    name: str
    available: bool
    reason: str  # why not available, or what is not readable
    energy_wrap_j: float | None  # the energy counter's range where it wraps around
    background: bool  # True: a thread samples during the window; False: one reading at each end

    def read(self) -> Reading: ...

    def static(self) -> dict[str, Any]:
        """Facts that do not change during a run: power limit, maximum clocks, driver."""
        ...


class Unavailable:
    name = "unavailable"
    available = False
    background = False
    energy_wrap_j = None

    def __init__(self, reason: str) -> None:
        self.reason = f"telemetry unavailable: {reason}"

    def read(self) -> Reading:
        raise RuntimeError(self.reason)

    def static(self) -> dict[str, Any]:
        return {"reason": self.reason}
