"""timing.fresh_inputs: new inputs written before every timed call, outside the timing, so that no call sees the
inputs another call saw.

GPU MODE's reference kernels found leaderboard entries that returned an output cached from an earlier call, keyed by
the inputs' identity or content (reference-kernels #160, #162, #170); FlashInfer-Bench found the same in an
agent-written kernel (starter-kit #21). Repeating a call on the same buffers lets such a cache answer every timed
call. Here each call reads inputs drawn from a new seed that the backend cannot predict (the system's entropy), the
writing is timed apart and stated in the row (`timer.fresh_inputs_s`), and engine/recheck.py checks the last timed
call's output against the last inputs written. Each call is timed alone (one call per timer window), as
timing.flush_l2 times them, so a write never falls between two calls of a sample.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.timers import Timer

SEEDS = random.SystemRandom()  # os.urandom: no backend can compute the next inputs' output before they are written


def unsupported(p: Prepared, case: Any) -> str | None:
    """Why this backend's row cannot be timed on fresh inputs (it is then skipped, saying so); None: it can."""
    if p.fresh_inputs is None:
        return ("timing.fresh_inputs: this backend cannot write new inputs before each call (its Prepared has no "
                "fresh_inputs)")
    if not dataclasses.is_dataclass(case) or "seed" not in {f.name for f in dataclasses.fields(case)}:
        return "timing.fresh_inputs: the case has no seed to draw new inputs from"
    return None


@dataclass
class Fresh:
    """One backend's new inputs: `write(case)` puts the inputs of `case` (its seed new) where the calls read them."""

    write: Callable[[Any], None]
    case: Any
    current: Any = None  # the case whose inputs the buffers hold now (the last timed call's)
    costs: list[float] = field(default_factory=list)  # seconds each write took, outside the timing

    def renew(self) -> None:
        new = dataclasses.replace(self.case, seed=SEEDS.randrange(1, 2**31))
        start = time.perf_counter()
        self.write(new)
        self.costs.append(time.perf_counter() - start)
        self.current = new


class FreshInputsTimer:
    """`base` timing one call at a time, new inputs written before each (outside its window). A timer that drains
    the queue by calling once first (JAX's, read-back) does not: that call would see the timed call's inputs."""

    last_host_s = None

    def __init__(self, base: Timer, fresh: Fresh) -> None:
        self._base, self.fresh = base, fresh
        self.name = f"{base.name}, one call at a time after new inputs (timing.fresh_inputs)"
        self.sync = base.sync
        self.last_output: Any = None
        self.last_wall_s: float | None = None  # per call, the write included: what a sample really costs
        if hasattr(base, "drain"):
            base.drain = False

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        total, start = 0.0, time.perf_counter()
        for _ in range(inner):
            self.fresh.renew()
            total += self._base.measure(fn, 1)
        self.last_wall_s = (time.perf_counter() - start) / inner
        self.last_output = getattr(self._base, "last_output", None)
        if hasattr(self._base, "last_output"):
            self._base.last_output = None  # held here alone (Series.take takes it or drops it)
        return total / inner
