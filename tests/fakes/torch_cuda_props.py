"""Stand-ins for `torch.cuda.get_device_properties(i)` (`torch._C._CudaDeviceProperties`) on an H100 and an
MI300X, with the attribute names and types a real one has.

Shapes copied from: torch 2.13 torch/_C/__init__.pyi `class _CudaDeviceProperties` (name, major, minor,
multi_processor_count, total_memory, gcnArchName, uuid, L2_cache_size, ...); torch/csrc/cuda/Module.cpp, where
`uuid` is a `torch._C._CUuuid` with `.bytes` (16 ints) and a __str__ of 8-4-4-4-12 lowercase hex, and
`gcnArchName` on a CUDA build repeats `name`; torch 2.13 torch/numa/binding.py, which reads the integers
`pci_domain_id`, `pci_bus_id`, `pci_device_id`. Older torch lacks the PCI attributes: pass `pci=None`.

The numbers (memory, bus ids, UUIDs) are made up for tests, in the ranges such devices report.
"""

from __future__ import annotations

from typing import Any


class CUuuid:
    """torch._C._CUuuid: `bytes` and the 8-4-4-4-12 hex text of them."""

    def __init__(self, data: bytes) -> None:
        assert len(data) == 16
        self._data = data

    @property
    def bytes(self) -> list[int]:
        return list(self._data)

    def __str__(self) -> str:
        h = self._data.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class CudaDeviceProperties:
    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)

    def __repr__(self) -> str:
        return f"_CudaDeviceProperties(name='{self.name}', uuid={self.uuid})"


def uuid_for(n: int) -> CUuuid:
    """A distinct, made-up UUID per physical GPU number n."""
    return CUuuid(bytes([0x5A, 0x1B, 0x2C, n]) + bytes(range(12)))


def h100(physical: int = 0, pci: tuple[int, int, int] | None = (0, 0x18, 0), **over: Any) -> CudaDeviceProperties:
    """An H100 SXM as a CUDA build of torch describes it (GPU number `physical` on the board)."""
    attrs: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "multi_processor_count": 132,
        "total_memory": 81559 * 2**20, "is_integrated": 0, "is_multi_gpu_board": 0,
        "max_threads_per_multi_processor": 2048, "gcnArchName": "NVIDIA H100 80GB HBM3", "warp_size": 32,
        "uuid": uuid_for(physical), "L2_cache_size": 50 * 2**20}
    if pci is not None:
        attrs.update(pci_domain_id=pci[0], pci_bus_id=pci[1], pci_device_id=pci[2])
    attrs.update(over)
    return CudaDeviceProperties(**attrs)


def mi300x(physical: int = 0, pci: tuple[int, int, int] | None = (0, 0x0C, 0), **over: Any) -> CudaDeviceProperties:
    """An MI300X as a ROCm build of torch describes it (hipDeviceProp_t under the same names)."""
    attrs: dict[str, Any] = {
        "name": "AMD Instinct MI300X", "major": 9, "minor": 4, "multi_processor_count": 304,
        "total_memory": 196592 * 2**20, "is_integrated": 0, "is_multi_gpu_board": 0,
        "max_threads_per_multi_processor": 2048, "gcnArchName": "gfx942:sramecc+:xnack-", "warp_size": 64,
        "uuid": uuid_for(0x80 + physical), "L2_cache_size": 4 * 2**20}
    if pci is not None:
        attrs.update(pci_domain_id=pci[0], pci_bus_id=pci[1], pci_device_id=pci[2])
    attrs.update(over)
    return CudaDeviceProperties(**attrs)
