"""Power, clocks, temperature, throttling and energy, sampled around every timed window.

One interface (`Sampler.read() -> Reading`, `static()`, `probe()`, `processes()`), one module per vendor API;
`open_sampler` picks by platform and never raises: a library that is missing or fails, or a timed device the
library cannot find, gives `Unavailable(reason)`, recorded in the bundle. The vendor samplers get the whole
DeviceInfo so they look the device up by UUID / PCI bus id, not by the framework's ordinal (identity.py).
"""

from __future__ import annotations

import contextlib

from xmfu.harness.machine.platform import Platform
from xmfu.harness.machine.telemetry.base import PROBE_KEYS, Probe, Reading, Sampler, Unavailable


def open_sampler(platform: Platform) -> Sampler:
    device = platform.device
    try:
        if platform.kind == "cuda":
            from xmfu.harness.machine.telemetry.nvml import NvmlSampler

            return NvmlSampler(device)
        if platform.kind == "rocm":
            from xmfu.harness.machine.telemetry.amdsmi import AmdSmiSampler

            return AmdSmiSampler(device)
        if platform.kind == "hpu":  # Intel Gaudi (habana-pyhlml)
            from xmfu.harness.machine.telemetry.hlml import HlmlSampler

            return HlmlSampler(device)
        if platform.kind == "neuron":  # AWS Trainium (neuron-monitor)
            from xmfu.harness.machine.telemetry.neuron import NeuronSampler

            return NeuronSampler(device)
        if platform.kind == "xpu":  # Intel GPUs (xpu-smi dump)
            from xmfu.harness.machine.telemetry.xpu_smi import XpuSmiSampler

            return XpuSmiSampler(device)
        if platform.kind == "tpu":
            from xmfu.harness.machine.telemetry.tpu import TpuSampler

            return TpuSampler(device.index)
        from xmfu.harness.machine.telemetry.cpu import CpuSampler

        return CpuSampler()
    except Exception as exc:  # ImportError (no nvidia-ml-py, no libamd_smi.so, no pyhlml), HLMLError_Uninitialized
        # (no libhlml), FileNotFoundError (no neuron-monitor, no xpu-smi), RuntimeError (xpu-smi dump gave no row),
        # init failures, no permission,
        # LookupError (the timed device is not among the library's)
        return Unavailable(f"{type(exc).__name__}: {exc}")


def close_sampler(sampler: Sampler | None) -> None:
    """End what a sampler holds (the neuron-monitor and xpu-smi samplers hold a streaming subprocess); samplers
    that read a library on demand have nothing to close. A failure to close is not the run's failure."""
    close = getattr(sampler, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):  # the run is at its end; the tool's own atexit kill remains
            close()


__all__ = ["PROBE_KEYS", "Probe", "Reading", "Sampler", "Unavailable", "close_sampler", "open_sampler"]
