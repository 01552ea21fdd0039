"""TPU: what JAX exposes (memory statistics); power, clocks and throttling are not exposed, said so."""

from __future__ import annotations

import time
from typing import Any

from harness.machine.telemetry.base import Reading


class TpuSampler:
    name = "tpu"
    available = True
    background = False  # read at both ends of the window only (see recorder.py)
    reason = "power, energy, clocks and throttling are not exposed through JAX/libtpu here"
    energy_wrap_j = None

    def __init__(self, index: int) -> None:
        import jax

        self.device = jax.local_devices()[index]  # `index` counts this process's devices (Platform.device)

    def read(self) -> Reading:
        return Reading(t=time.perf_counter())

    def static(self) -> dict[str, Any]:
        stats = self.device.memory_stats() or {}
        return {"api": "jax", "device_kind": self.device.device_kind, "memory_stats": dict(stats),
                "unreadable": self.reason}
