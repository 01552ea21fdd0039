"""TPU: what JAX exposes (memory statistics); power, clocks and throttling are not exposed, said so."""

from __future__ import annotations

import time
from typing import Any

from xmfu.harness.machine.telemetry.base import READING_FIELDS, Probe, Reading, probe_report


class TpuSampler:
    name = "tpu"
    available = True
    background = False  # read at both ends of the window only (see recorder.py)
    reason = "power, energy, clocks and throttling are not exposed through JAX/libtpu here"
    processes_reason = "JAX/libtpu do not list the processes on a TPU chip"
    energy_wrap_j = None

    def __init__(self, index: int) -> None:
        import jax

        self.device = jax.local_devices()[index]  # `index` counts this process's devices (Platform.device)

    def read(self) -> Reading:
        return Reading(t=time.perf_counter())

    def static(self) -> dict[str, Any]:
        stats = self.device.memory_stats() or {}
        return {"api": "jax", "device_kind": self.device.device_kind, "memory_stats": dict(stats),
                "unreadable": self.reason, "clocks": self._clocks()}

    def _clocks(self) -> dict[str, Any]:
        return {"locked": None, "detail": {}, "source": "jax", "reason": self.reason}

    def processes(self) -> list[dict[str, Any]] | None:
        return None

    def probe(self) -> dict[str, dict[str, Any]]:
        fields = {k: Probe(source="jax", reason=self.reason) for k in READING_FIELDS}
        identity = Probe({"resolved_by": "ordinal", "id": self.device.id, "device_kind": self.device.device_kind},
                         "jax.devices()")
        return probe_report(fields, identity, self._clocks(), None, self.processes_reason, None)
