"""A small copy of torch.cuda's timing and graph API, for testing the timers without a GPU.

Copies the signatures of torch 2.13: torch/cuda/streams.py (`Event(enable_timing=False, blocking=False,
interprocess=False)`, `Event.record(stream=None)`, `Event.synchronize()`, `Event.elapsed_time(end_event)` in
milliseconds; `Stream.wait_stream(stream)`), torch/cuda/__init__.py (`synchronize(device=None)`,
`current_stream(device=None)`, the `stream(stream)` context manager) and torch/cuda/graphs.py (`CUDAGraph()`,
`CUDAGraph.replay()`, `graph(cuda_graph, pool=None, stream=None, capture_error_mode="global")`). Device time is
simulated: every call of the work adds `kernel_s` to a device clock, and an event records that clock.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any


class FakeCudaRuntime:
    def __init__(self, kernel_s: float = 1e-3) -> None:
        self.kernel_s = kernel_s
        self.device_clock = 0.0
        self.capturing: Any = None
        self.syncs = 0
        runtime = self

        class Event:
            def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
                self.t: float | None = None

            def record(self, stream: Any = None) -> None:
                self.t = runtime.device_clock

            def synchronize(self) -> None:
                runtime.syncs += 1

            def elapsed_time(self, end_event: Event) -> float:
                return (end_event.t - self.t) * 1e3  # milliseconds, as torch returns

        class Stream:
            def wait_stream(self, stream: Any) -> None:
                pass

        class CUDAGraph:
            def __init__(self) -> None:
                self.captured: list[Any] = []

            def replay(self) -> None:
                for _ in self.captured:
                    runtime.device_clock += runtime.kernel_s

        @contextmanager
        def graph(cuda_graph: CUDAGraph, pool: Any = None, stream: Any = None, capture_error_mode: str = "global"):
            runtime.capturing = cuda_graph
            try:
                yield
            finally:
                runtime.capturing = None

        @contextmanager
        def stream(s: Any):
            yield

        def synchronize(device: Any = None) -> None:
            runtime.syncs += 1

        self.cuda = SimpleNamespace(Event=Event, Stream=Stream, CUDAGraph=CUDAGraph, graph=graph, stream=stream,
                                    synchronize=synchronize, current_stream=lambda device=None: Stream())

    def kernel(self) -> None:
        """The work being timed: one kernel launch (recorded into a graph while one is being captured)."""
        if self.capturing is not None:
            self.capturing.captured.append("kernel")
        else:
            self.device_clock += self.kernel_s
