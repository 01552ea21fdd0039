"""What is this machine: cuda | rocm | tpu | xpu | hpu | neuron | cpu, and the identity of the device a run uses.

Detection asks the frameworks that are installed: torch (a CUDA or ROCm build) first, then JAX (its CUDA or
ROCm plugin, or a TPU), and falls back to the CPU. JAX is only asked where one of its accelerator plugins is
installed, so a CPU run never pays for initialising it. A run asks the frameworks its backends use first
(`detect(frameworks=...)`), so a JAX-only run never imports torch on a CPU or on a GPU its JAX drives. Where JAX
finds nothing on a host whose /dev shows a GPU (a CPU-only jaxlib beside an NVIDIA or AMD GPU), torch is asked
after all: the run then measures that GPU and the JAX backends say why they cannot, instead of the run quietly
timing the host. The `describe_*` functions take plain objects so tests can feed them made-up device properties
(tests/fakes).
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import platform as _host
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from xmfu.harness.machine import torch_device
from xmfu.harness.machine.neuron import lnc_degree
from xmfu.harness.machine.ranks import process_info

KINDS = ("cuda", "rocm", "tpu", "xpu", "hpu", "neuron", "cpu")
FRAMEWORKS = ("torch", "jax")  # what detection can ask, in the order it asks
# Device nodes the GPU drivers create, looked at without a framework: NVIDIA's (/dev/nvidia0 per GPU, /dev/nvidiactl,
# as jax/_src/hardware_utils.py has_visible_nvidia_gpu checks) and AMD's compute interface /dev/kfd (ROCm's "Running
# ROCm Docker containers": shared by all GPUs).
GPU_DEVICE_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd")

# AMD Instinct MI300-series last-level "Infinity Cache" (256 MB) is not reported by torch; a cold-cache
# run must rotate more than it (AMD CDNA3 white paper). gfx950 (MI350 series) keeps 256 MB.
AMD_INFINITY_CACHE_BYTES = {"gfx942": 256 * 2**20, "gfx950": 256 * 2**20}


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # cuda | rocm | tpu | xpu | hpu | neuron | cpu
    name: str
    vendor: str  # nvidia | amd | google | intel | aws, or the CPU's
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
    # JAX's `local_hardware_id`: the CUDA/HIP runtime's ordinal of the device (jaxlib: "e.g., the CUDA device
    # number"), which `index` (its place among jax.local_devices()) need not be in a multi-process run
    hardware_id: int | None = None
    # The torch device type that drives it ("cuda" on CUDA and ROCm builds, "xpu", "hpu", "neuron", "tpu"); None
    # where torch did not find it (JAX did, or the CPU)
    torch_device_type: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Platform:
    kind: str
    devices: tuple[DeviceInfo, ...]
    reason: str  # how it was decided
    chosen: int | None = None  # the run's `device_index`: this local device instead of the local rank's

    @property
    def device(self) -> DeviceInfo:
        """The device this process measures: the one `device_index` chose, else its local rank's (LOCAL_RANK
        under torchrun, SLURM_LOCALID under Slurm), counted among the devices it sees; the first in a
        single-process run."""
        if self.chosen is not None:
            return self.devices[self.chosen]
        return self.devices[process_info().local_rank % len(self.devices)]

    def choose(self, index: int) -> Platform:
        """This platform measuring its local device `index` (IndexError when it has no such device)."""
        if not 0 <= index < len(self.devices):
            raise IndexError(f"device {index} of {len(self.devices)}")
        return replace(self, chosen=index)

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
    """DeviceInfo from a `jax.Device` on a GPU (CUDA or ROCm plugin) or a TPU.

    The name is `device_kind` (the driver's device name on GPUs, the chip generation on TPUs); the rest are
    PJRT device attributes, absent ones read as None. Memory is `bytes_limit` from memory_stats(): on GPUs
    that is what JAX's allocator may take (75% of the memory unless XLA_PYTHON_CLIENT_MEM_FRACTION says
    otherwise, docs/gpu_memory_allocation.rst in jax), not the whole device.
    """
    kind = jax_device_platform(device)
    name = str(device.device_kind)
    common = {"name": name, "index": index, "memory_bytes": _jax_bytes_limit(device), "jax_device_kind": name}
    if kind == "tpu":  # TensorCores per JAX device (jax/_src/mesh.py reads `num_cores` on TPUs)
        return DeviceInfo(kind="tpu", vendor="google", multiprocessors=_int_attribute(device, "num_cores"),
                          **common)
    if kind not in ("cuda", "rocm"):
        raise ValueError(f"{device!r} is neither a GPU nor a TPU")
    # PJRT GPU attributes (xla/pjrt/gpu: SetupDeviceDescription): core_count = SMs or CUs; compute_capability
    # = "major.minor" on CUDA, the gfx version ("gfx942", the gcnArchName before its ':' flags) on ROCm. The
    # attributes are coords, device_vendor, slice_index, partition_index, compute_capability,
    # shared_memory_per_block_optin, core_count (and numa_node, fabric_uuid: the NVLink fabric's, not the GPU's, in
    # later XLA): no GPU UUID and no PCI bus id, so telemetry maps `local_hardware_id` through the visible-devices
    # variables instead (telemetry/identity.py).
    capability = getattr(device, "compute_capability", None)
    cores = _int_attribute(device, "core_count")
    common["hardware_id"] = _int_attribute(device, "local_hardware_id")
    if kind == "rocm":
        arch = str(capability) if capability else None
        return DeviceInfo(kind="rocm", vendor="amd", multiprocessors=cores, arch=arch,
                          cache_bytes=AMD_INFINITY_CACHE_BYTES.get(arch or ""), **common)
    # JAX exposes no L2 size: the cold-cache option cannot size its copies on a JAX-only NVIDIA machine.
    return DeviceInfo(kind="cuda", vendor="nvidia", multiprocessors=cores,
                      compute_capability=str(capability) if capability else None, **common)


def jax_device_platform(device: Any) -> str | None:
    """cuda | rocm | tpu for a `jax.Device`, None for anything else (its CPU).

    jaxlib reports both GPU plugins as platform "gpu" (jaxlib/py_device.cc, a compatibility shim; "cuda" and
    "rocm" are accepted too should it go). CUDA and ROCm are told apart as JAX does it itself, by the client's
    platform_version, "cuda <version>" or "rocm <version>" (jax/_src/array.py __dlpack_device__), with the
    device_vendor attribute as a second witness.
    """
    platform = str(device.platform)
    if platform in ("tpu", "cuda", "rocm"):
        return platform
    if platform != "gpu":
        return None
    version = str(getattr(device.client, "platform_version", "")).lower()
    vendor = str(getattr(device, "device_vendor", "")).lower()
    if "rocm" in version or "advanced micro devices" in vendor:
        return "rocm"
    if "cuda" in version or "nvidia" in vendor:
        return "cuda"
    return None


def _int_attribute(device: Any, name: str) -> int | None:
    value = getattr(device, name, None)  # jax.Device raises AttributeError for an attribute PJRT lacks
    return int(value) if value is not None else None


def _jax_bytes_limit(device: Any) -> int | None:
    try:
        stats = device.memory_stats() or {}
    except Exception:  # jaxlib raises for a device without allocator statistics
        return None
    return int(stats["bytes_limit"]) if "bytes_limit" in stats else None


def _torch_devices() -> tuple[str, list[DeviceInfo]] | None:
    try:
        import torch
    except ImportError:
        return None
    device_type = torch_device.accelerator_type(torch)
    if device_type is None:
        return None
    if device_type != "cuda":
        kind = torch_device.platform_kind(torch, device_type)[0]
        count = torch_device.device_count(torch)
        return kind, [describe_torch_accelerator(torch, device_type, i) for i in range(count)]
    hip = getattr(torch.version, "hip", None)
    devices = [replace(describe_torch_device(torch.cuda.get_device_properties(i), i, hip), torch_device_type="cuda")
               for i in range(torch.cuda.device_count())]
    return ("rocm" if hip else "cuda"), devices


def describe_torch_accelerator(torch: Any, device_type: str, index: int,
                               environ: Mapping[str, str] | None = None) -> DeviceInfo:
    """DeviceInfo of a non-CUDA torch device (xpu, hpu, neuron, tpu) from what its device module offers: the name
    from `get_device_name(i)`, memory from `get_device_properties(i).total_memory`, where present. A Neuron
    device is a logical NeuronCore: its `multiprocessors` is the LNC degree, the unit its peak is scaled by
    (machine/neuron.py; the instance type comes from the EC2 metadata that telemetry/neuron.py reads, absent here,
    so an unset NEURON_LOGICAL_NC_CONFIG leaves it None with the peak)."""
    kind, vendor = torch_device.platform_kind(torch, device_type)
    module = getattr(torch, device_type, None)
    name = _call(module, "get_device_name", index) or f"{vendor} {device_type} device"
    props = _call(module, "get_device_properties", index)
    memory = getattr(props, "total_memory", None)
    cores = None
    if kind == "neuron":
        cores, _ = lnc_degree(os.environ if environ is None else environ, None)
    return DeviceInfo(kind=kind, name=str(name), vendor=vendor, index=index,
                      memory_bytes=int(memory) if isinstance(memory, int) else None, multiprocessors=cores,
                      torch_device_type=device_type)


def _call(module: Any, name: str, index: int) -> Any:
    """module.name(index), None where the device module lacks the call or it fails (a vendor build may not offer
    every torch.cuda-like query)."""
    call = getattr(module, name, None)
    if call is None:
        return None
    try:
        return call(index)
    except Exception:  # a vendor module's failure only loses this fact
        return None


# The packages that give JAX an accelerator, as jax 0.10.2 names them: the kernel halves of the GPU plugins
# (jax_plugins/cuda/__init__.py and jax_plugins/rocm/__init__.py look them up by these names), their PJRT halves
# in the `jax_plugins` namespace (xla_cuda12, xla_rocm7...: jax_plugins/*/setup.py), and libtpu (jax[tpu]).
JAX_GPU_PACKAGES = {"cuda": ("jax_cuda13_plugin", "jax_cuda12_plugin"),
                    "rocm": ("jax_rocm7_plugin", "jax_rocm60_plugin")}
JAX_PJRT_PREFIXES = {"cuda": "xla_cuda", "rocm": "xla_rocm"}


def jax_accelerator_plugins(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The accelerators JAX could drive here (cuda, rocm, tpu), from installed packages; imports nothing."""
    env = os.environ if environ is None else environ
    pjrt = _jax_plugin_modules()
    found = [kind for kind, packages in JAX_GPU_PACKAGES.items()
             if any(map(_installed, packages)) or any(m.startswith(JAX_PJRT_PREFIXES[kind]) for m in pjrt)]
    # jax[tpu] installs `libtpu`, or an image points TPU_LIBRARY_PATH at libtpu.so.
    if _installed("libtpu") or "TPU_LIBRARY_PATH" in env:
        found.append("tpu")
    return tuple(found)


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # ValueError: in sys.modules without a spec
        return False


def _jax_plugin_modules() -> list[str]:
    """Modules of the `jax_plugins` namespace package, listed without importing any of them."""
    try:
        spec = importlib.util.find_spec("jax_plugins")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [m.name for m in pkgutil.iter_modules(list(spec.submodule_search_locations))]


def _jax_devices(join_timeout_s: float | None = None) -> tuple[str, list[DeviceInfo]] | None:
    """This process's JAX accelerators, asked for only where a JAX GPU or TPU plugin is installed."""
    plugins = jax_accelerator_plugins()
    if not plugins or not _installed("jax"):
        return None
    from xmfu.harness.machine.frameworks import share_device_memory
    from xmfu.harness.machine.jax_distributed import initialize_jax_distributed

    share_device_memory()  # before JAX creates its GPU client, which would otherwise take 75% of the memory
    # A multi-process run must join jax.distributed before JAX first touches a device (jax/_src/distributed.py
    # refuses afterwards); the plugin says which kind of device it expects.
    initialize_jax_distributed(plugins[0], join_timeout_s)
    import jax

    try:
        devices = jax.local_devices()  # the default backend: the accelerator when its plugin works, else the CPU
    except RuntimeError:  # a backend that failed to initialise where JAX_PLATFORMS insists on it
        return None
    kind = jax_device_platform(devices[0]) if devices else None
    if kind is None:
        return None
    return kind, [describe_jax_device(d, i) for i, d in enumerate(devices)]


def cpu_device() -> DeviceInfo:
    from xmfu.harness.machine.cpu_info import read_cpu_facts

    facts = read_cpu_facts()
    return DeviceInfo(
        kind="cpu", name=facts.model, vendor=facts.vendor, memory_bytes=facts.memory_bytes,
        multiprocessors=facts.physical_cores, arch=_host.machine(), cache_bytes=facts.llc_bytes,
        cpu=facts.as_dict(),
    )


class NoAcceleratorError(RuntimeError):
    """device=gpu was asked for on a machine where neither torch nor JAX sees an accelerator. Its message is one
    paragraph saying what was looked at, for the command line to print as is."""


def detect(requested: str = "auto", frameworks: Collection[str] = FRAMEWORKS,
           join_timeout_s: float | None = None) -> Platform:
    """Identify the platform. `requested` is the config's `device`: auto | cpu | gpu (gpu: any accelerator).

    `frameworks`: the ones the run computes with, asked first. The others are asked only where they could see an
    accelerator the run's own frameworks missed (torch where /dev shows a GPU; JAX where it has an accelerator
    plugin, as always), so a misconfigured framework is reported by its backends instead of the run quietly
    timing the host, and a JAX-only run on a CPU or on a GPU its JAX drives never imports torch.
    `join_timeout_s`: how long a multi-process run's JAX waits for its processes (jax_distributed.jax_join_options).
    """
    if requested == "cpu":
        return Platform("cpu", (cpu_device(),), "device=cpu was asked for")
    ask = {"torch": _torch_devices, "jax": lambda: _jax_devices(join_timeout_s)}
    others = [f for f in FRAMEWORKS if f not in frameworks and (f != "torch" or host_shows_gpu())]
    for source in [*(f for f in FRAMEWORKS if f in frameworks), *others]:
        found = ask[source]()
        if found:
            kind, devices = found
            return Platform(kind, tuple(devices), f"{source} sees {len(devices)} {kind} device(s)")
    if requested == "gpu":
        raise NoAcceleratorError(_why_no_accelerator(frameworks))
    asked = " or ".join(f for f in FRAMEWORKS if f in frameworks or f in others)
    return Platform("cpu", (cpu_device(),), f"no accelerator visible to {asked}")


def host_shows_gpu(nodes: Collection[str] = GPU_DEVICE_NODES) -> bool:
    """Whether a GPU driver's device node exists (whatever a framework makes of it)."""
    return any(os.path.exists(node) for node in nodes)


def _why_no_accelerator(frameworks: Collection[str]) -> str:
    if "torch" not in frameworks and not host_shows_gpu():
        torch_says = f"no GPU device node ({', '.join(GPU_DEVICE_NODES)}) and no torch backend to ask"
    else:
        try:
            import torch

            cpu_build = not (getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None))
            torch_says = "torch is a CPU-only build" if cpu_build else "torch sees no GPU"
        except ImportError:
            torch_says = "torch is not installed"
    plugins = jax_accelerator_plugins()
    jax_says = (f"JAX has a {'/'.join(plugins)} plugin but finds no such device" if plugins else
                "JAX has no GPU or TPU plugin (jax[cuda12], jax[cuda13], jax-rocm7-plugin or jax[tpu])")
    return (f"device=gpu was asked for, but no accelerator is visible: {torch_says}, and {jax_says}. "
            "Install the framework build for this machine's accelerator, or run with device=cpu to measure "
            "the host.")


def bench_overrides() -> str:
    """The overrides `make bench` adds: the smoke sizes where there is no accelerator."""
    return "" if detect().has_accelerator else "experiment=smoke"


if __name__ == "__main__":
    print(bench_overrides())
