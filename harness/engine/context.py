"""What an implementation may know about the run it is part of."""

from __future__ import annotations

from dataclasses import dataclass

from xmfu.harness.engine.settings import RunConfig
from xmfu.harness.engine.timing import copies_for_cold_cache
from xmfu.harness.machine.platform import DeviceInfo, Platform


@dataclass(frozen=True)
class RunContext:
    config: RunConfig
    platform: Platform

    @property
    def device(self) -> DeviceInfo:
        return self.platform.device

    @property
    def torch_device(self) -> str:
        """torch device string for this process: "cuda:N" (ROCm builds too), or "<type>:N" for the accelerator torch
        found ("xpu:N", "neuron:N"...); "cpu" where torch drives none of the platform's devices."""
        if self.platform.kind in ("cuda", "rocm"):
            return f"cuda:{self.device.index}"
        device_type = self.device.torch_device_type
        return f"{device_type}:{self.device.index}" if device_type and device_type != "cpu" else "cpu"

    def input_copies(self, input_bytes: float) -> int:
        """How many copies of a case's inputs to rotate through (1 unless timing.cold_cache; never with
        timing.fresh_inputs, which the config refuses with it)."""
        if not self.config.timing.cold_cache:
            return 1
        return copies_for_cold_cache(self.device.cache_bytes, input_bytes)
