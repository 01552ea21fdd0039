"""One timer interface, one implementation per framework and timing method.

Workloads never time anything: they hand the engine a zero-argument callable and the engine picks the timer
for the framework it runs on (`timer_for`). `measure(fn, inner)` returns seconds per call, the mean of
`inner` back-to-back calls. Timers that can also keep the host's time to issue the calls (`last_host_s`):
when it exceeds the device time the GPU waited for the host, and the figure is launch overhead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from xmfu.harness.machine import sync as rules
from xmfu.harness.machine import torch_device
from xmfu.harness.machine.frameworks import make_torch_device_current


class Timer(Protocol):
    name: str
    sync: rules.SyncRule  # how completion is established: the row's `sync` (machine/sync.py)
    last_host_s: float | None  # host time to issue the last sample's calls, per call (None: not measured)
    last_output: Any  # what the last timed call returned (engine/recheck.py re-checks it after the timed loop)

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        """Seconds per call, averaged over `inner` back-to-back calls of `fn`."""
        ...


def _torch() -> Any:
    import torch

    return torch


class HostTimer:
    """perf_counter around synchronous work (torch on a CPU, the Triton interpreter)."""

    name = "perf_counter"
    last_host_s = None  # the host time is the measurement itself
    last_output: Any = None
    sync = rules.HOST_RULE

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        out = None
        start = time.perf_counter()
        for _ in range(inner):
            out = fn()
        elapsed = time.perf_counter() - start
        self.last_output = out
        return elapsed / inner


class TorchEventTimer:
    """Device events recorded on the current stream: torch.cuda.Event on CUDA and ROCm (torch.cuda covers both
    vendors; the CUDA timing path stays as it was measured), the device-generic torch.Event with
    torch.accelerator.synchronize on another accelerator whose rule is an event (machine/sync.py)."""

    def __init__(self, torch: Any = None, device: str | None = None, sync: rules.SyncRule | None = None) -> None:
        self._torch = torch or _torch()
        self._device = device
        self.sync = sync or rules.TORCH_RULES["cuda"]
        self._generic = self.sync.method == rules.DEVICE_EVENT
        self.name = "torch.Event" if self._generic else "torch.cuda.Event"
        self.last_host_s: float | None = None
        self.last_output: Any = None

    def _events(self) -> tuple[Any, Any]:
        if self._generic:
            device = self._device or "xpu"
            torch_device.synchronize(self._torch, device)
            return torch_device.timing_event(self._torch, device), torch_device.timing_event(self._torch, device)
        cuda = self._torch.cuda
        cuda.synchronize()
        return cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        start, end = self._events()
        out = None
        start.record()
        issued = time.perf_counter()
        for _ in range(inner):
            out = fn()
        self.last_host_s = (time.perf_counter() - issued) / inner
        end.record()
        end.synchronize()
        self.last_output = out
        return start.elapsed_time(end) / 1e3 / inner


class CudaGraphTimer:
    """`inner` calls captured once in a CUDA/HIP graph, timed as graph replays (the method of
    triton.testing.do_bench_cudagraph): launch overhead leaves the figure, so small kernels are measured as
    the device runs them. Capture follows torch's recipe (torch.cuda.graphs documentation: warm up on a
    side stream, then capture); a callable that cannot be captured fails its row with torch's reason."""

    name = "torch.cuda.CUDAGraph replay"
    sync = rules.TORCH_RULES["cuda"]

    def __init__(self, torch: Any = None) -> None:
        self._torch = torch or _torch()
        self._graphs: dict[tuple[int, int], Any] = {}
        self._outputs: dict[tuple[int, int], Any] = {}  # what the captured calls return: replays write into it
        self.last_host_s: float | None = None
        self.last_output: Any = None

    def _graph(self, fn: Callable[[], Any], inner: int) -> Any:
        key = (id(fn), inner)
        if key not in self._graphs:
            cuda = self._torch.cuda
            side = cuda.Stream()
            side.wait_stream(cuda.current_stream())
            with cuda.stream(side):
                for _ in range(3):
                    fn()
            cuda.current_stream().wait_stream(side)
            graph = cuda.CUDAGraph()
            with cuda.graph(graph):
                for _ in range(inner):
                    self._outputs[key] = fn()
            self._graphs[key] = graph
        return self._graphs[key]

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        cuda = self._torch.cuda
        graph = self._graph(fn, inner)
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        cuda.synchronize()
        start.record()
        issued = time.perf_counter()
        graph.replay()
        self.last_host_s = (time.perf_counter() - issued) / inner
        end.record()
        end.synchronize()
        self.last_output = self._outputs.get((id(fn), inner))
        return start.elapsed_time(end) / 1e3 / inner


class JaxTimer:
    """perf_counter, waiting on the last output: JAX dispatch is asynchronous on every backend.

    Calls on one device execute in order, so blocking on the last output waits for all of them; the
    output may be any pytree (a tuple of arrays, a dict), `jax.block_until_ready` waits on all of it.
    """

    name = "perf_counter+block_until_ready"
    sync = rules.JAX_RULE

    def __init__(self, block: Callable[[Any], Any] | None = None) -> None:
        if block is None:
            import jax

            block = jax.block_until_ready
        self._block = block
        self.last_host_s: float | None = None
        self.last_output: Any = None
        # False under timing.fresh_inputs (engine/fresh.py): the draining call would see the inputs the timed call
        # is meant to be the first to see, and the new inputs were waited for when written
        self.drain = True

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        if self.drain:
            self._block(fn())  # drain anything queued before the window opens
        start = time.perf_counter()
        out = None
        for _ in range(inner):
            out = fn()
        self.last_host_s = (time.perf_counter() - start) / inner  # dispatch only
        self._block(out)
        elapsed = time.perf_counter() - start
        self.last_output = out
        return elapsed / inner


def first_tensor(out: Any) -> Any:
    """The first tensor in a call's output (a tensor, or one inside tuples, lists or dicts), None without one."""
    if hasattr(out, "reshape") and hasattr(out, "numel"):
        return out if out.numel() > 0 else None
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    return next((t for t in map(first_tensor, items) if t is not None), None)


class ReadBackTimer:
    """perf_counter, ended by copying one element of the last call's output to the host: the rule where a device's
    own sync calls are not trusted (machine/sync.py: Trainium, Gaudi). A host copy cannot finish before the work
    that produces it, and calls on one device run in order, so it waits for all `inner` calls. The one-element copy
    is inside the timed window (its latency is part of the figure, a caveat the rule states)."""

    name = "perf_counter+read-back of one element"

    def __init__(self, sync: rules.SyncRule) -> None:
        self.sync = sync
        self.last_host_s: float | None = None
        self.last_output: Any = None
        self.drain = True  # as JaxTimer.drain

    @staticmethod
    def _read_back(out: Any) -> None:
        tensor = first_tensor(out)
        if tensor is None:
            raise RuntimeError("the call returned no tensor to read back, and read-back is the only sync proven on "
                               "this device: return the output from the timed callable")
        tensor.reshape(-1)[0].item()

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        if self.drain:
            self._read_back(fn())  # drain anything queued before the window opens
        start = time.perf_counter()
        out = None
        for _ in range(inner):
            out = fn()
        self.last_host_s = (time.perf_counter() - start) / inner  # issue only
        self._read_back(out)
        elapsed = time.perf_counter() - start
        self.last_output = out
        return elapsed / inner


class FlushingTimer:
    """Before every timed call, overwrite a buffer of at least twice the last-level cache (H100: 50 MB L2;
    MI300X: 256 MB Infinity Cache) outside the timed region, so each call starts cold: the method of
    triton.testing.do_bench, with the buffer sized to the device instead of a fixed 256 MiB. Each call is
    timed on its own (device events on a GPU, perf_counter on a host); the sample is their mean. The events are
    torch.cuda.Event on CUDA/ROCm, and the device-generic torch.Event on another accelerator whose rule is an
    event (`sync` DEVICE_EVENT, machine/sync.py; `device` then names it), as TorchEventTimer does."""

    last_host_s = None

    def __init__(self, flush: Callable[[], Any], torch: Any = None, sync: rules.SyncRule | None = None,
                 device: str | None = None) -> None:
        self._flush, self._torch, self._device = flush, torch, device
        self.sync = sync or (rules.TORCH_RULES["cuda"] if torch else rules.HOST_RULE)
        self._generic = torch is not None and self.sync.method == rules.DEVICE_EVENT
        events = "torch.Event" if self._generic else "torch.cuda.Event" if torch else "perf_counter"
        self.name = events + " per call after a last-level-cache flush"
        self.last_wall_s: float | None = None  # per call, the flush included: what a sample really costs
        self.last_output: Any = None

    def _events(self) -> tuple[Any, Any]:
        if self._generic:
            device = self._device or "xpu"
            return torch_device.timing_event(self._torch, device), torch_device.timing_event(self._torch, device)
        cuda = self._torch.cuda
        return cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)

    def _one(self, fn: Callable[[], Any]) -> float:
        if self._torch is None:
            start = time.perf_counter()
            self.last_output = fn()
            return time.perf_counter() - start
        start, end = self._events()
        start.record()
        self.last_output = fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def measure(self, fn: Callable[[], Any], inner: int) -> float:
        total, start = 0.0, time.perf_counter()
        for _ in range(inner):
            self._flush()
            total += self._one(fn)
        self.last_wall_s = (time.perf_counter() - start) / inner
        return total / inner


def flush_buffer(cache_bytes: int | None, device: str | None) -> tuple[Callable[[], Any], int]:
    """(a callable overwriting 2 x `cache_bytes`, its size in bytes); at least 64 MiB when the cache size is
    unknown. `device` is a torch device string for a GPU, None for host memory."""
    size = max(2 * (cache_bytes or 0), 64 * 2**20)
    if device is not None:
        torch = _torch()
        buf = torch.empty(size // 4, dtype=torch.int32, device=device)
        return (lambda: buf.zero_()), size
    import numpy as np

    host = np.empty(size // 8, dtype=np.float64)
    return (lambda: host.fill(0.0)), size


def timer_for(framework: str, platform_kind: str, *, cuda_graph: bool = False,
              flush: Callable[[], Any] | None = None, device: str | None = None) -> Timer:
    """The timer for a backend's framework here, following its sync rule (machine/sync.py). CUDA graphs apply to
    torch on CUDA/ROCm GPUs; an LLC flush to torch there and to host work (JAX runs whole compiled programs, whose
    calls cannot be split by a flush; a read-back or device-event timer times whole samples).

    `device` ("cuda:N", "xpu:N"...): the device the work runs on, made torch's current device first (the timer's
    events and synchronize act on the current device: machine.frameworks.make_torch_device_current). A rule that
    proves nothing never reaches here: the engine leaves those rows untimed."""
    rule = rules.sync_rule(framework, platform_kind)
    torch_gpu = framework == "torch" and platform_kind in ("cuda", "rocm")
    if framework == "torch" and platform_kind != "cpu" and device is not None:
        make_torch_device_current(device)
    if framework == "jax":
        return JaxTimer()
    if rule.method == rules.READ_BACK:
        return ReadBackTimer(rule)
    if rule.method == rules.DEVICE_EVENT:  # another accelerator's events; flushed per call where asked
        if flush is not None:
            return FlushingTimer(flush, torch=_torch(), sync=rule, device=device)
        return TorchEventTimer(device=device, sync=rule)
    if flush is not None:
        timer: Timer = FlushingTimer(flush, torch=_torch() if torch_gpu else None)
    elif torch_gpu:
        timer = CudaGraphTimer() if cuda_graph else TorchEventTimer(sync=rule)
    else:
        timer = HostTimer()
    timer.sync = rule  # the row's record: torch's own rule on a CPU, not the generic host one
    return timer
