"""A torch module whose accelerator is not CUDA (Trainium's `neuron`, an Intel `xpu`, Gaudi's `hpu`, TorchTPU's
`tpu`), for driving xmfu's device-agnostic torch path without one.

Copies the signatures of torch 2.13's `torch.accelerator` (inspect.signature on torch 2.13.0+cpu):
`is_available() -> bool`, `current_accelerator(check_available: bool = False) -> torch.device | None`,
`device_count() -> int`, `current_device_index() -> int`, `set_device_index(device, /) -> None` (device: torch.device
| str | int | None), `synchronize(device=None, /) -> None`, `memory_allocated(device_index=None, /) -> int`,
`max_memory_allocated(device_index=None, /) -> int`, `reset_peak_memory_stats(device_index=None, /) -> None`,
`empty_cache() -> None`; and `torch.Event(device=None, *, enable_timing=False, blocking=False, interprocess=False)`
with `record(stream=None)`, `synchronize()`, `elapsed_time(end_event) -> float` in milliseconds.
`surface="2.6"` keeps only what torch 2.6.0 had (read in its PyPI wheel, torch/accelerator/__init__.py):
`current_accelerator()` without its argument, `current_device_index` / `set_device_index` with the deprecated
`current_device_idx` / `set_device_idx` aliases, no memory calls.

`torch.cuda` is a recorder: any call through it lands in `cuda_calls`, so a test shows the device-agnostic path
makes none (is_available() False, device_count() 0, as on a torch built without CUDA). The device module
`torch.<type>` has `get_device_name` and `current_device()`; an `xpu` one also the allocator calls torch/xpu/memory.py
has (`max_memory_allocated(device=None)`, `reset_peak_memory_stats(device=None)`, `memory_allocated(device=None)`,
`empty_cache()`), which a 2.6 surface falls back on.

Device time is simulated as in torch_cuda_runtime.py: each `kernel()` adds `kernel_s` to a device clock, which
an event records. Outputs are real CPU tensors, so a read-back is real.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch as _real


class Device:
    """torch.device's face ("type", "index", str "type:index"): a real torch.device refuses "neuron" or "tpu" until
    the vendor's backend renames PrivateUse1, so the fake keeps its own."""

    def __init__(self, spec: Any, index: int | None = None) -> None:
        if isinstance(spec, Device):
            spec, index = spec.type, spec.index
        head, _, tail = str(spec).partition(":")
        self.type, self.index = head, int(tail) if tail else index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


MODERN_ONLY = ("memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "empty_cache")  # 2.8+


class _CudaRecorder:
    """torch.cuda on a torch without CUDA: every call is recorded by name."""

    def __init__(self, calls: list[str]) -> None:
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(name)
            return 0 if name == "device_count" else False if name in ("is_available", "is_initialized") else None
        return call


class FakeAcceleratorTorch:
    def __init__(self, device_type: str = "neuron", count: int = 2, kernel_s: float = 1e-3, surface: str = "2.13",
                 name: str = "Trainium2") -> None:
        self.device_type, self.count, self.kernel_s = device_type, count, kernel_s
        self.device_clock, self.current, self.calls = 0.0, 0, []
        self.allocated = self.peak = 0
        self.device = Device
        self.version = SimpleNamespace(cuda=None, hip=None)
        self.cuda_calls: list[str] = []
        self.cuda = _CudaRecorder(self.cuda_calls)
        self.accelerator = self._accelerator(surface)
        module = SimpleNamespace(get_device_name=lambda i=None: name, current_device=lambda: self.current)
        if device_type == "xpu":
            module.max_memory_allocated = lambda device=None: self.peak
            module.memory_allocated = lambda device=None: self.allocated
            module.reset_peak_memory_stats = self._reset_peak
            module.empty_cache = lambda: self.calls.append(("xpu.empty_cache", None))
        setattr(self, device_type, module)
        fake = self

        class Event:
            def __init__(self, device: Any = None, *, enable_timing: bool = False, blocking: bool = False,
                         interprocess: bool = False) -> None:
                self.device, self.t = device, None

            def record(self, stream: Any = None) -> None:
                self.t = fake.device_clock

            def synchronize(self) -> None:
                fake.calls.append(("event.synchronize", str(self.device)))

            def elapsed_time(self, end_event: Event) -> float:
                return (end_event.t - self.t) * 1e3

        self.Event = Event

    def _accelerator(self, surface: str) -> SimpleNamespace:
        acc = SimpleNamespace(
            is_available=lambda: self.count > 0,
            device_count=lambda: self.count,
            current_accelerator=self._current_accelerator if surface != "2.6" else lambda: Device(self.device_type),
            current_device_index=lambda: self.current,
            current_device_idx=lambda: self.current,
            set_device_index=self._set_device, set_device_idx=self._set_device,
            synchronize=lambda device=None, /: self.calls.append(("synchronize", str(device))),
            memory_allocated=lambda device_index=None, /: self.allocated,
            max_memory_allocated=lambda device_index=None, /: self.peak,
            reset_peak_memory_stats=self._reset_peak,
            empty_cache=lambda: self.calls.append(("empty_cache", None)),
        )
        if surface == "2.6":
            for name in MODERN_ONLY:
                delattr(acc, name)
        return acc

    def _current_accelerator(self, check_available: bool = False) -> Any:
        if check_available and not self.count:
            return None
        return Device(self.device_type)

    def _set_device(self, device: Any, /) -> None:
        self.calls.append(("set_device", str(device)))
        self.current = device if isinstance(device, int) else Device(device).index

    def _reset_peak(self, device_index: Any = None, /) -> None:
        self.peak = self.allocated

    def kernel(self) -> Any:
        """The timed work: advances the device clock and returns its (CPU) output."""
        self.device_clock += self.kernel_s
        return _real.ones(4)
