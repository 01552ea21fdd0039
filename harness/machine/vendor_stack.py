"""The vendor software stacks of the accelerators torch reaches through a vendor build: AWS Neuron SDK, Intel Gaudi
SynapseAI, Intel oneAPI. Each is named by the versions that can be read without importing anything: the installed
distributions (importlib.metadata) and the kernel driver's /sys/module/<name>/version (a module declaring
MODULE_VERSION exposes it there). What cannot be read is None; nothing here has been checked on such a machine.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata
from pathlib import Path

# Distributions each stack installs (PyPI names: torch-neuronx, neuronx-cc, libneuronxla from AWS's pip repository;
# habana-torch-plugin, habana-pyhlml from Intel Gaudi's; intel-sycl-rt, the oneAPI SYCL runtime torch's XPU wheels
# depend on) and the kernel module of its driver (neuron; habanalabs; Intel's GPU driver is the in-tree i915/xe).
STACKS = {
    "neuron_sdk": {"packages": ("torch-neuronx", "neuronx-cc", "libneuronxla"), "driver_module": "neuron"},
    "synapseai": {"packages": ("habana-torch-plugin", "habana-pyhlml"), "driver_module": "habanalabs"},
    "oneapi": {"packages": ("intel-sycl-rt", "intel-opencl-rt"), "driver_module": None},
}


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _module_version(name: str) -> str | None:
    try:
        return Path(f"/sys/module/{name}/version").read_text().strip() or None
    except OSError:
        return None


def vendor_stacks(version: Callable[[str], str | None] = _dist_version,
                  driver: Callable[[str], str | None] = _module_version) -> dict[str, dict]:
    """{stack: {"packages": {dist: version|None}, "driver": version|None, "present": bool}}."""
    out = {}
    for stack, parts in STACKS.items():
        packages = {p: version(p) for p in parts["packages"]}
        module = parts["driver_module"]
        drv = driver(module) if module else None
        out[stack] = {"packages": packages, "driver_module": module, "driver": drv,
                      "present": drv is not None or any(packages.values())}
    return out
