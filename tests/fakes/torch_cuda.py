"""`torch.cuda.get_device_properties(i)`-like objects for an H100 SXM and an MI300X, and a torch module around
them, so detection can be tested on a machine without a GPU.

Copies torch 2.13: the fields of `_CudaDeviceProperties` (torch/_C/__init__.pyi: name, major, minor,
multi_processor_count, total_memory, gcnArchName, uuid, L2_cache_size, ...); `uuid` is bound as `_CUuuid`,
whose str() is the 8-4-4-4-12 hex form and `bytes` its 16 bytes (torch/csrc/cuda/Module.cpp); the PCI fields
are ints read as `pci_domain_id`, `pci_bus_id`, `pci_device_id` (torch/numa/binding.py, lines 594-597 in 2.13),
read with getattr because older builds lack them. `torch.version.hip` is None on CUDA builds.

Values are those real machines print (torch's repr gives total_memory // 2**20 as "MB"):
- H100: "_CudaDeviceProperties(name='NVIDIA H100 80GB HBM3', major=9, minor=0, total_memory=81090MB,
  multi_processor_count=132, uuid=a7bfde5d-8151-8a6d-fdfc-b31d020cd2f5, L2_cache_size=50MB)"
  (stanford-cs336 spring2025 lecture notes, an 8xH100 SXM node).
- MI300X: "_CudaDeviceProperties(name='AMD Instinct MI300X', major=9, minor=4, gcnArchName='gfx942:sramecc+:xnack-',
  total_memory=196592MB, multi_processor_count=304, uuid=66333330-6463-3464-3030-646565323262, L2_cache_size=4MB)"
  (ROCm/ROCm issue 4203, torch 2.6 on ROCm 6.2.4); torch.version.hip "6.2.41133-dd7f95766" (torch 2.5.1+rocm6.2).
The PCI numbers are illustrative: no public log pairs them with these devices.

`FakeTorch(..., runtime=True)` also records the runtime calls xmfu makes on a CUDA device, with torch 2.13's
signatures: torch/cuda/__init__.py `set_device(device)`, `current_device() -> int`, `synchronize(device=None)`,
`is_initialized() -> bool`; torch/cuda/memory.py `empty_cache()`, `max_memory_allocated(device=None)`,
`reset_peak_memory_stats(device=None)`, `memory_allocated(device=None)`; and, as a CUDA build of torch 2.8+ has it,
a `torch.accelerator` whose calls are recorded too ("accelerator.<name>"), so a test can show which of the two a
CUDA device is driven through.
"""

from __future__ import annotations

import importlib.machinery
import uuid as _uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

MIB = 2**20


@dataclass(frozen=True)
class CUuuid:
    """torch's `_CUuuid`: 16 bytes, printed as 8-4-4-4-12 hex."""

    bytes: bytes

    def __str__(self) -> str:
        return str(_uuid.UUID(bytes=self.bytes))


@dataclass(frozen=True)
class CudaDeviceProperties:
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int
    uuid: CUuuid
    gcnArchName: str  # HIP's arch string; CUDA builds bind the device name here (Module.cpp)
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    warp_size: int = 32


def h100_sxm(bus: int = 0x18) -> CudaDeviceProperties:
    return CudaDeviceProperties(
        name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=81090 * MIB, multi_processor_count=132,
        L2_cache_size=50 * MIB, uuid=CUuuid(_uuid.UUID("a7bfde5d-8151-8a6d-fdfc-b31d020cd2f5").bytes),
        gcnArchName="NVIDIA H100 80GB HBM3", pci_bus_id=bus,
    )


def mi300x(bus: int = 0x0C) -> CudaDeviceProperties:
    # HIP reports major.minor 9.4 for gfx942 (the repr above); torch's describe path ignores them on ROCm.
    return CudaDeviceProperties(
        name="AMD Instinct MI300X", major=9, minor=4, total_memory=196592 * MIB, multi_processor_count=304,
        L2_cache_size=4 * MIB, uuid=CUuuid(_uuid.UUID("66333330-6463-3464-3030-646565323262").bytes),
        gcnArchName="gfx942:sramecc+:xnack-", pci_bus_id=bus, warp_size=64,
    )


HIP_VERSION = "6.2.41133-dd7f95766"
CUDA_VERSION = "12.8"


@dataclass
class FakeTorch:
    """The parts of the torch module that detection reads: torch.cuda.{is_available, device_count,
    get_device_properties} and torch.version.{cuda, hip}."""

    props: list[CudaDeviceProperties] = field(default_factory=list)
    hip: str | None = None
    cuda_version: str | None = CUDA_VERSION
    runtime: bool = False  # True: record the runtime calls and add torch.accelerator (see the docstring)

    def __post_init__(self) -> None:
        self.__spec__ = importlib.machinery.ModuleSpec("torch", None)  # importlib.util.find_spec("torch") reads it
        self.cuda = SimpleNamespace(is_available=lambda: bool(self.props), device_count=lambda: len(self.props),
                                    get_device_properties=self._properties)
        self.version = SimpleNamespace(cuda=None if self.hip else self.cuda_version, hip=self.hip)
        self.calls: list[tuple[str, Any]] = []
        if self.runtime:
            self._add_runtime()

    def _add_runtime(self) -> None:
        def rec(name: str, result: Any = None) -> Any:
            def call(*args: Any) -> Any:
                self.calls.append((name, args[0] if args else None))
                return result
            return call

        for name, result in (("set_device", None), ("current_device", 0), ("synchronize", None),
                             ("is_initialized", True), ("empty_cache", None), ("max_memory_allocated", 7),
                             ("reset_peak_memory_stats", None), ("memory_allocated", 5)):
            setattr(self.cuda, name, rec(name, result))
        self.accelerator = SimpleNamespace(**{
            name: rec(f"accelerator.{name}", result) for name, result in (
                ("set_device_index", None), ("current_device_index", 0), ("synchronize", None),
                ("empty_cache", None), ("max_memory_allocated", 7), ("reset_peak_memory_stats", None),
                ("memory_allocated", 5), ("device_count", len(self.props)))})
        self.accelerator.is_available = lambda: bool(self.props)
        self.accelerator.current_accelerator = lambda check_available=False: SimpleNamespace(type="cuda")

    def _properties(self, index: Any = None) -> CudaDeviceProperties:
        return self.props[0 if index is None else int(index)]


def torch_cuda(count: int = 1) -> FakeTorch:
    return FakeTorch([h100_sxm(0x18 + i) for i in range(count)])


def torch_rocm(count: int = 1) -> FakeTorch:
    return FakeTorch([mi300x(0x0C + i) for i in range(count)], hip=HIP_VERSION)


def torch_cpu_only() -> FakeTorch:
    """A CPU build: no GPU and neither version set."""
    return FakeTorch([], hip=None, cuda_version=None)
