"""What is this machine: cuda | rocm | tpu | cpu, and the identity of the device a run uses.

Detection asks the frameworks that are installed (torch first, then JAX for TPUs) and falls back to the
CPU. The `describe_*` functions take plain objects so tests can feed them made-up device properties.
"""

from __future__ import annotations

import importlib.util
import os
import platform as _host
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("cuda", "rocm", "tpu", "cpu")

# AMD Instinct MI300-series last-level "Infinity Cache" (256 MB) is not reported by torch; a cold-cache
# run must rotate more than it (AMD CDNA3 white paper). gfx950 (MI350 series) keeps 256 MB.
AMD_INFINITY_CACHE_BYTES = {"gfx942": 256 * 2**20, "gfx950": 256 * 2**20}


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # cuda | rocm | tpu | cpu
    name: str
    vendor: str
    index: int = 0
    memory_bytes: int | None = None
    multiprocessors: int | None = None  # SMs (NVIDIA), CUs (AMD), physical cores (CPU)
    compute_capability: str | None = None
    arch: str | None = None  # gcnArchName on ROCm, ISA summary on CPU
    cache_bytes: int | None = None  # last-level cache the cold-cache option must defeat
    jax_device_kind: str | None = None
    cpu: dict[str, Any] = field(default_factory=dict)  # CPU only: flags, clock and core facts
    # Which physical GPU this is, whatever CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / Slurm did to the
    # ordinals: telemetry looks the device up by these, never by `index`.
    uuid: str | None = None  # torch's string, 8-4-4-4-12 hex, without NVML's "GPU-" prefix
    pci_bus_id: str | None = None  # "dddd:bb:dd.0", the form sysfs, NVML and amdsmi all accept

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Platform:
    kind: str
    devices: tuple[DeviceInfo, ...]
    reason: str  # how it was decided

    @property
    def device(self) -> DeviceInfo:
        """The device this process measures (LOCAL_RANK under torchrun, else the first)."""
        rank = int(os.environ.get("LOCAL_RANK", "0"))
        return self.devices[rank % len(self.devices)]

    @property
    def has_accelerator(self) -> bool:
        return self.kind != "cpu"


def torch_device_uuid(props: Any) -> str | None:
    """`props.uuid` as text, None where torch has none or gives the all-zero UUID.

    torch/csrc/cuda/Module.cpp binds `uuid` to cudaDeviceProp::uuid as a `torch._C._CUuuid` whose __str__ is
    the 16 bytes as 8-4-4-4-12 lowercase hex (no "GPU-" prefix); builds without it (FBCODE) lack the attribute.
    """
    raw = getattr(props, "uuid", None)
    text = str(raw).strip() if raw is not None else ""
    return text if text.replace("-", "").strip("0") else None


def torch_pci_bus_id(props: Any) -> str | None:
    """"dddd:bb:dd.0" from `pci_domain_id`, `pci_bus_id`, `pci_device_id`, None where torch lacks them.

    torch 2.13's own torch/numa/binding.py reads these three integers from the device properties and formats
    them the same way; older torch has no such attributes. cudaDeviceProp has no PCI function number: a GPU
    is function 0. This is the form amdsmi_get_processor_handle_from_bdf parses (4-digit domain, amdsmi
    py-interface `_parse_bdf`) and one nvmlDeviceGetHandleByPciBusId_v2 accepts ("%x:%x:%x.%x", nvml.h).
    """
    ids = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ids):
        return None
    domain, bus, device = ids
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def describe_torch_device(props: Any, index: int, hip_version: str | None) -> DeviceInfo:
    """DeviceInfo from `torch.cuda.get_device_properties(i)` (works for CUDA and ROCm builds)."""
    arch = getattr(props, "gcnArchName", None) or None
    identity = {"uuid": torch_device_uuid(props), "pci_bus_id": torch_pci_bus_id(props)}
    if hip_version:
        base_arch = arch.split(":")[0] if arch else None
        cache = AMD_INFINITY_CACHE_BYTES.get(base_arch or "", getattr(props, "L2_cache_size", None))
        name = props.name.strip() or (f"AMD {base_arch}" if base_arch else "AMD GPU")
        return DeviceInfo(
            kind="rocm", name=name, vendor="amd", index=index, memory_bytes=int(props.total_memory),
            multiprocessors=int(props.multi_processor_count), arch=arch, cache_bytes=cache, **identity,
        )
    return DeviceInfo(
        kind="cuda", name=props.name, vendor="nvidia", index=index, memory_bytes=int(props.total_memory),
        multiprocessors=int(props.multi_processor_count), compute_capability=f"{props.major}.{props.minor}",
        cache_bytes=getattr(props, "L2_cache_size", None), **identity,
    )


def describe_jax_device(device: Any, index: int) -> DeviceInfo:
    """DeviceInfo from a `jax.Device` on a TPU (its `device_kind` names the chip generation)."""
    return DeviceInfo(
        kind="tpu", name=str(device.device_kind), vendor="google", index=index,
        jax_device_kind=str(device.device_kind),
    )


def _torch_devices() -> tuple[str, list[DeviceInfo]] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    hip = getattr(torch.version, "hip", None)
    devices = [describe_torch_device(torch.cuda.get_device_properties(i), i, hip)
               for i in range(torch.cuda.device_count())]
    return ("rocm" if hip else "cuda"), devices


def _tpu_devices() -> list[DeviceInfo] | None:
    # jax[tpu] installs the `libtpu` package (or an image points TPU_LIBRARY_PATH at libtpu.so); without
    # either there is no TPU to find, and asking jax would only log a libtpu warning and slow CPU runs down.
    if importlib.util.find_spec("libtpu") is None and "TPU_LIBRARY_PATH" not in os.environ:
        return None
    try:
        import jax
    except ImportError:
        return None
    try:
        devices = jax.devices()
    except RuntimeError:
        return None
    tpus = [describe_jax_device(d, i) for i, d in enumerate(devices) if d.platform == "tpu"]
    return tpus or None


def cpu_device() -> DeviceInfo:
    from harness.machine.cpu_info import read_cpu_facts

    facts = read_cpu_facts()
    return DeviceInfo(
        kind="cpu", name=facts.model, vendor=facts.vendor, memory_bytes=facts.memory_bytes,
        multiprocessors=facts.physical_cores, arch=_host.machine(), cache_bytes=facts.llc_bytes,
        cpu=facts.as_dict(),
    )


def detect(requested: str = "auto") -> Platform:
    """Identify the platform. `requested` is the config's `device`: auto | cpu | gpu."""
    if requested != "cpu":
        found = _torch_devices()
        if found:
            kind, devices = found
            return Platform(kind, tuple(devices), f"torch sees {len(devices)} {kind} device(s)")
        tpus = _tpu_devices()
        if tpus:
            return Platform("tpu", tuple(tpus), f"jax sees {len(tpus)} TPU device(s)")
        if requested == "gpu":
            raise RuntimeError("device=gpu was asked for, but neither torch nor jax sees an accelerator")
    why = "device=cpu was asked for" if requested == "cpu" else "no accelerator visible to torch or jax"
    return Platform("cpu", (cpu_device(),), why)


def bench_overrides() -> str:
    """The overrides `make bench` adds: the smoke sizes where there is no accelerator."""
    return "" if detect().has_accelerator else "experiment=smoke"


if __name__ == "__main__":
    print(bench_overrides())
