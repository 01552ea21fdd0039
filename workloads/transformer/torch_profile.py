"""A torch profiler trace of training steps, as Chrome trace JSON for the bundle (`workload.profile=true`).

torch.profiler.profile records host ops and, on a GPU, its kernels (ProfilerActivity.CUDA covers ROCm builds
too); `export_chrome_trace` writes the format chrome://tracing and Perfetto open.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

from xmfu.harness.engine.timers import first_tensor
from xmfu.harness.machine import torch_device

TRACE_NAME = "trace.json"


def chrome_trace(step: Callable[[], Any], device: str, steps: int = 1) -> bytes:
    """Run `step` `steps` times under the profiler (untimed: the sampling comes later) and return the trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(ProfilerActivity.CUDA)
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
