"""`jax.Device`-like objects for GPUs and TPUs, and a small `jax` module around them.

Copies jax 0.10.2 / jaxlib 0.10.2 (tag jax-v0.10.2 of jax-ml/jax) and the XLA PJRT GPU client it builds on:
- `platform` is "gpu" for both the CUDA and the ROCm plugin (jaxlib/py_device.cc PyDevice::platform maps
  PJRT's "cuda"/"rocm" to "gpu"), "tpu" on TPUs; `client.platform` does the same (jaxlib/py_client.h
  platform_name). `client.platform_version` is "cuda <CUDART_VERSION>" or "rocm <TF_ROCM_VERSION>"
  (xla/pjrt/gpu/se_gpu_pjrt_client.cc StreamExecutorGpuClient::platform_version); JAX itself tells CUDA from
  ROCm by that string (jax/_src/array.py __dlpack_device__, jax/_src/numpy/array_constructors.py). The numbers
  below are illustrative: xmfu reads only the prefix.
- Other device facts are PJRT device attributes reached through PyDevice.__getattr__ (py_device.cc), which
  raises AttributeError for a missing one. GPUs: compute_capability ("major.minor" on CUDA, the gfx version, e.g.
  "gfx942", on ROCm: MakeComputeCapabilityString and RocmComputeCapability::gfx_version), core_count (SMs/CUs),
  device_vendor ("NVIDIA Corporation" / "Advanced Micro Devices, Inc": cuda_executor.cc / rocm_executor.cc),
  all set by StreamExecutorGpuTopologyDescription::SetupDeviceDescription. TPUs: num_cores (read by
  jax/_src/mesh.py and jax/_src/pallas/mosaic/core.py).
- No GPU UUID and no PCI bus id: SetupDeviceDescription's attributes are coords, device_vendor, slice_index,
  partition_index, compute_capability, shared_memory_per_block_optin and core_count (xla/pjrt/gpu/
  se_gpu_topology_description.cc; later XLA adds numa_node and the NVLink fabric's fabric_uuid). What identifies
  the GPU is `local_hardware_id`, "Opaque hardware ID, e.g., the CUDA device number" (jaxlib Device), here = id.
- device_kind: the driver's device name on GPUs (the same string torch prints; "AMD Instinct MI300X" is quoted
  in jax-ml/jax PR 37634); on TPUs the kinds of jax/_src/pallas/mosaic/tpu_info.py chip_version_from_device_kind:
  "TPU v5 lite" (v5e), "TPU v5" (v5p), "TPU v6 lite" (v6e); TensorCores per JAX device from its ChipVersion table.
- memory_stats(): the keys of PyDevice::MemoryStats; `bytes_limit` is present when the allocator has one. On
  GPUs it is the allocator's share, 75% of the memory by default (docs/gpu_memory_allocation.rst). The TPU
  figures are tpu_info.py's hbm_capacity_bytes per chip; what libtpu reports was not checked.
"""

from __future__ import annotations

import importlib.machinery
import types
from dataclasses import dataclass, field
from typing import Any

MIB = 2**20


@dataclass(frozen=True)
class FakeClient:
    platform: str
    platform_version: str


class FakeDevice:
    """Attributes as jaxlib's Device has them: fixed properties plus PJRT attributes via __getattr__."""

    def __init__(self, id: int, platform: str, device_kind: str, client: FakeClient, bytes_limit: int | None,
                 attributes: dict[str, Any], process_index: int = 0) -> None:
        self.id = id
        self.platform = platform
        self.device_kind = device_kind
        self.client = client
        self.process_index = process_index
        self.local_hardware_id = id
        self._bytes_limit = bytes_limit
        self._attributes = attributes

    def __getattr__(self, name: str) -> Any:
        attributes = self.__dict__.get("_attributes", {})
        if name in attributes:
            return attributes[name]
        raise AttributeError(name)

    def memory_stats(self) -> dict[str, int]:
        stats = {"num_allocs": 0, "bytes_in_use": 0, "peak_bytes_in_use": 0, "largest_alloc_size": 0}
        if self._bytes_limit is not None:
            stats["bytes_limit"] = self._bytes_limit
        return stats

    def __repr__(self) -> str:
        return f"FakeDevice(id={self.id}, kind={self.device_kind!r})"


CUDA_CLIENT = FakeClient("gpu", "cuda 12080")
ROCM_CLIENT = FakeClient("gpu", "rocm 60400")
TPU_CLIENT = FakeClient("tpu", "PJRT C API\nTFRT TPU v5 lite\nBuilt on Jan 1 2026 00:00:00 (1767225600) cl/0")


def h100(id: int = 0) -> FakeDevice:
    return FakeDevice(id, "gpu", "NVIDIA H100 80GB HBM3", CUDA_CLIENT, int(81090 * MIB * 0.75), {
        "compute_capability": "9.0", "core_count": 132, "device_vendor": "NVIDIA Corporation",
        "partition_index": 0, "slice_index": 0, "coords": [id]})


def mi300x(id: int = 0) -> FakeDevice:
    return FakeDevice(id, "gpu", "AMD Instinct MI300X", ROCM_CLIENT, int(196592 * MIB * 0.75), {
        "compute_capability": "gfx942", "core_count": 304, "device_vendor": "Advanced Micro Devices, Inc",
        "partition_index": 0, "slice_index": 0, "coords": [id]})


def tpu(kind: str, id: int = 0) -> FakeDevice:
    """TPU7x: two JAX devices per chip (tpu_info.py: two TensorCores, no Megacore, one TensorCore per device;
    mesh_utils.py indexes 7x devices by coords and core_on_chip), each with half the chip's 206e9 B of HBM."""
    cores, hbm, per_chip = {"TPU v5 lite": (1, 17_200_000_000, 1), "TPU v5": (2, 103_000_000_000, 1),
                            "TPU v6 lite": (1, 34_400_000_000, 1), "TPU7x": (1, 206_000_000_000 // 2, 2)}[kind]
    return FakeDevice(id, "tpu", kind, TPU_CLIENT, hbm, {"num_cores": cores, "core_on_chip": id % per_chip,
                                                         "coords": [id // per_chip, 0, 0]})


def cpu_device(id: int = 0) -> FakeDevice:
    return FakeDevice(id, "cpu", "cpu", FakeClient("cpu", "cpu"), None, {})


@dataclass
class FakeDistributed:
    """jax.distributed: records initialize()'s keyword arguments (its 0.10.2 signature, distributed.py:222): the
    process layout in `calls`, the bounds (timeouts) in `bounds`. `on_initialize` stands in for what the real one
    does to the process besides (e.g. the preemption notifier taking SIGTERM)."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    bounds: list[dict[str, Any]] = field(default_factory=list)
    on_initialize: Any = None
    on_shutdown: Any = None  # what the real shutdown's barrier does besides: wait for the others, or raise

    def initialize(self, coordinator_address: str | None = None, num_processes: int | None = None,
                   process_id: int | None = None, local_device_ids: int | list[int] | None = None,
                   cluster_detection_method: str | None = None, initialization_timeout: int = 300,
                   heartbeat_timeout_seconds: int = 100, shutdown_timeout_seconds: int = 300,
                   coordinator_bind_address: str | None = None, slice_index: int | None = None,
                   partition_index: int | None = None) -> None:
        self._record(coordinator_address, num_processes, process_id, local_device_ids,
                     {"initialization_timeout": initialization_timeout,
                      "heartbeat_timeout_seconds": heartbeat_timeout_seconds,
                      "shutdown_timeout_seconds": shutdown_timeout_seconds})

    def _record(self, coordinator_address: Any, num_processes: Any, process_id: Any, local_device_ids: Any,
                bounds: dict[str, Any]) -> None:
        if self.calls:
            raise RuntimeError("distributed.initialize should only be called once.")
        self.calls.append({"coordinator_address": coordinator_address, "num_processes": num_processes,
                           "process_id": process_id, "local_device_ids": local_device_ids})
        self.bounds.append(bounds)
        if self.on_initialize:
            self.on_initialize()

    def is_initialized(self) -> bool:
        return bool(self.calls)

    def shutdown(self) -> None:
        """jax.distributed.shutdown() (0.10.2, distributed.py:344; the same name since 0.4.x): the client's
        shutdown barrier waits for every process, then the client (and process 0's service) is gone."""
        if self.on_shutdown:
            self.on_shutdown()
        self.calls.clear()


@dataclass
class FakeDistributed0438(FakeDistributed):
    """jax.distributed.initialize as jax 0.4.38 has it (tag jax-v0.4.38, jax/_src/distributed.py): no heartbeat or
    shutdown bound in its signature (they came in 0.7.0 and 0.8.1). The real one has no is_initialized either;
    this fake keeps it (its absence is covered in tests/machine/test_jax_distributed.py)."""

    def initialize(self, coordinator_address: str | None = None, num_processes: int | None = None,  # type: ignore[override]
                   process_id: int | None = None, local_device_ids: int | list[int] | None = None,
                   cluster_detection_method: str | None = None, initialization_timeout: int = 300,
                   coordinator_bind_address: str | None = None) -> None:
        self._record(coordinator_address, num_processes, process_id, local_device_ids,
                     {"initialization_timeout": initialization_timeout})


# Config options a fake JAX knows; jax/_src/config.py Config.update raises AttributeError("Unrecognized config
# option: ...") for any other (the same in jax-v0.4.38 and jax-v0.10.2). jax_enable_preemption_service: 0.8.2.
KNOWN_OPTIONS = {"0.10.2": {"jax_cpu_collectives_implementation", "jax_enable_preemption_service"},
                 "0.4.38": {"jax_cpu_collectives_implementation"}}


def fake_jax(local: list[FakeDevice], global_devices: list[FakeDevice] | None = None,
             version: str = "0.10.2") -> types.ModuleType:
    """A `jax` module whose default backend holds `local` (this process's devices); `global_devices` are every
    process's (jax.devices() after jax.distributed), defaulting to `local`. `version`: 0.10.2 or 0.4.38 (the
    supported floor), for jax.distributed.initialize's signature and the config options it knows."""
    module = types.ModuleType("jax")
    module.__spec__ = importlib.machinery.ModuleSpec("jax", None)  # importlib.util.find_spec("jax") reads it
    everything = list(global_devices if global_devices is not None else local)
    module.local_devices = lambda process_index=None, backend=None, host_id=None: list(local)
    module.devices = lambda backend=None: list(everything)
    module.default_backend = lambda: local[0].platform if local else "cpu"
    module.distributed = FakeDistributed0438() if version == "0.4.38" else FakeDistributed()
    module.config_updates = []

    def update(name: str, value: Any) -> None:
        if name not in KNOWN_OPTIONS[version]:
            raise AttributeError(f"Unrecognized config option: {name}")
        module.config_updates.append((name, value))

    module.config = types.SimpleNamespace(update=update)
    module.block_until_ready = lambda x: x
    return module
