"""A torch profiler trace of training steps, as Chrome trace JSON for the bundle (`workload.profile=true`).

torch.profiler.profile records host ops and, on an accelerator, its kernels: ProfilerActivity.CUDA (ROCm builds
too), XPU, HPU, or PrivateUse1 for an out-of-tree device type such as neuron (torch 2.13 ProfilerActivity members:
CPU, XPU, MTIA, CUDA, HPU, PrivateUse1; looked up by name, so a torch without one records host ops only).
`export_chrome_trace` writes the format chrome://tracing and Perfetto open.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from xmfu.harness.engine.timers import first_tensor
from xmfu.harness.machine import torch_device
from xmfu.harness.machine.frameworks import quiet_torch_profiler

TRACE_NAME = "trace.json"


def device_activities(torch: Any, activity: Any, device: str) -> list[Any]:
    """The profiler activity that records `device`'s kernels, or none (a CPU, or a torch without it)."""
    kind = torch_device.device_type_of(device)
    if kind == "cpu":
        return []
    name = {"cuda": "CUDA", "xpu": "XPU", "hpu": "HPU", "mtia": "MTIA"}.get(kind)
    if name is None:  # an out-of-tree backend torch knows as its PrivateUse1 device (TorchNeuron, TorchTPU)
        renamed = getattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")()
        name = "PrivateUse1" if kind == renamed else None
    found = getattr(activity, name, None) if name else None
    return [found] if found is not None else []


def chrome_trace(step: Callable[[], Any], device: str, steps: int = 1) -> bytes:
    """Run `step` `steps` times under the profiler (untimed: the sampling comes later) and return the trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    quiet_torch_profiler()
    activities = [ProfilerActivity.CPU, *device_activities(torch, ProfilerActivity, device)]
    with profile(activities=activities) as prof:
        out = None
        for _ in range(steps):
            out = step()
        # the device's work inside the trace: torch.cuda.synchronize(device) on CUDA/ROCm, the device's own wait
        # elsewhere (a read-back where its synchronize is not trusted: machine/sync.py), nothing on the host
        torch_device.wait_for(torch, device, first_tensor(out))
    fd, path = tempfile.mkstemp(suffix=".json", prefix="xmfu-trace-")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)
