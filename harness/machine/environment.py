"""What the numbers depend on besides the code: versions, drivers, devices, relevant environment variables."""

from __future__ import annotations

import os
import platform as host
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

from xmfu.harness.machine import compat, nccl_conf, stack
from xmfu.harness.machine.driver import driver_version
from xmfu.harness.machine.peaks import PEAKS_FILE, load_table, lookup
from xmfu.harness.machine.platform import FRAMEWORKS, Platform
from xmfu.harness.machine.ranks import process_info

# Distribution names as PyPI spells them. torch's own Triton ships as `pytorch-triton` (CUDA nightlies) or
# `pytorch-triton-rocm` (ROCm wheels) beside or instead of `triton`; JAX's GPU support is two wheels each, the
# plugin and the PJRT library (jax-cuda12-plugin + jax-cuda12-pjrt, jax-rocm7-plugin + jax-rocm7-pjrt, ...): a
# plugin/PJRT version skew changes the XLA that compiles, so both are recorded.
PACKAGES = ("xmfu", "torch", "jax", "jaxlib", "triton", "pytorch-triton", "pytorch-triton-rocm", "numpy",
            "ml_dtypes", "hydra-core", "omegaconf", "nvidia-ml-py", "amdsmi",
            "jax-cuda12-plugin", "jax-cuda12-pjrt", "jax-cuda13-plugin", "jax-cuda13-pjrt",
            "jax-rocm60-plugin", "jax-rocm60-pjrt", "jax-rocm7-plugin", "jax-rocm7-pjrt", "libtpu")
ENV_PATTERN = re.compile(
    r"^(NCCL_|RCCL_|HSA_|HIP_|ROCM_|HIPBLASLT_|ROCBLAS_|MIOPEN_|UCX_|FI_|TORCH_|PYTORCH_|CUDA_|CUBLAS|XLA_|JAX_|TPU_|"
    r"TRITON_|OMP_|MKL_|KMP_|"
    r"OPENBLAS_|LOCAL_RANK$|RANK$|WORLD_SIZE$|MASTER_ADDR$|MASTER_PORT$|SLURM_JOB_ID$|SLURM_NODELIST$)"
)
PEAK_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


def package_versions() -> dict[str, str | None]:
    from importlib import metadata  # here: readers of bundles import this module and never ask (19 ms a start)

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def relevant_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if ENV_PATTERN.match(k)}


def _torch_stack(load: bool = True) -> dict[str, Any]:
    """torch's CUDA/HIP/cuDNN build and threads. `load=False` (a run without torch backends): only a torch already
    imported is read, so recording the environment does not import it; its version is in `packages` either way."""
    if "torch" not in sys.modules and load:
        try:
            import torch
        except ImportError:
            return {}
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    info: dict[str, Any] = {"cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None),
                            "num_threads": torch.get_num_threads()}
    if torch.backends.cudnn.is_available():
        info["cudnn"] = torch.backends.cudnn.version()
    return info


def git_sha(root: Path) -> str | None:
    if not (root / ".git").exists() or not shutil.which("git"):
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=False)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() + ("-dirty" if dirty else "")) or None


def nccl_config_files(environ: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The NCCL/RCCL config files NCCL would read: their allow-listed settings, size and digest (nccl_conf)."""
    return nccl_conf.config_files(os.environ if environ is None else environ, ENV_PATTERN)


def topology() -> str | None:
    """`nvidia-smi topo -m` or `rocm-smi --showtopo`, whichever exists."""
    for cmd in (["nvidia-smi", "topo", "-m"], ["rocm-smi", "--showtopo"]):
        if shutil.which(cmd[0]):
            try:
                return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).stdout
            except (OSError, subprocess.TimeoutExpired):
                return None
    return None


def nccl_version() -> str | None:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def peaks_used(plat: Platform, cpu_clock_ghz: float | None = None) -> dict[str, Any]:
    """The peak table entries that apply to this run's device, and the table's own checksum."""
    device = plat.device
    return {"file": PEAKS_FILE.name, "sha256": load_table()["sha256"], "device": device.name,
            "by_dtype": {d: lookup(device, d, cpu_clock_ghz=cpu_clock_ghz).as_row() for d in PEAK_DTYPES}}


# XMFU_IMAGE_DIGEST: the image's digest as the job that started the container knows it (sha256:...; a container
# cannot read its own digest), for `xmfu history changes` to say the image moved (docs/nightly.md)
CONTAINER_VARS = ("CONTAINER_IMAGE", "IMAGE_NAME", "NVIDIA_PYTORCH_VERSION", "PYTORCH_VERSION", "CUDA_VERSION",
                  "ROCM_VERSION", "SINGULARITY_NAME", "APPTAINER_NAME", "SINGULARITY_CONTAINER", "ENROOT_ROOTFS",
                  "HOSTNAME", "XMFU_IMAGE_DIGEST")


def container(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """What the usual variables say about the image this runs in (nothing is guessed beyond them)."""
    env = os.environ if environ is None else environ
    found = {k: env[k] for k in CONTAINER_VARS if k in env}
    found["dockerenv"] = Path("/.dockerenv").exists()
    return found


def telemetry_static(plat: Platform, sampler: Any = None) -> dict[str, Any]:
    from xmfu.harness.machine.telemetry import open_sampler

    sampler = sampler or open_sampler(plat)
    try:
        return {"sampler": sampler.name, **sampler.static()}
    except Exception as exc:  # a static query that fails is recorded, not fatal
        return {"sampler": sampler.name, "error": f"{type(exc).__name__}: {exc}"}


def capture(plat: Platform, cpu_clock_ghz: float | None = None, sampler: Any = None,
            frameworks: Collection[str] = FRAMEWORKS) -> dict[str, Any]:
    """Everything the numbers depend on. `frameworks`: those of the run's backends; no other is imported here."""
    driver = driver_version(plat.kind)  # (version, where it came from / why there is none)
    return {
        "host": {"hostname": socket.gethostname(), "os": host.platform(), "kernel": host.release(),
                 "machine": host.machine(), "python": sys.version.split()[0], "executable": sys.executable},
        "container": container(),
        "telemetry": telemetry_static(plat, sampler),
        "packages": package_versions(),
        "compat": compat.record(),  # the supported range and what of this stack lies outside it
        "torch": _torch_stack(load="torch" in frameworks),
        "torch_settings": stack.torch_settings(plat.kind),
        "driver": driver[0],
        "driver_source": driver[1],
        "platform": {"kind": plat.kind, "reason": plat.reason},
        "devices": [d.as_dict() for d in plat.devices],
        "env": relevant_env(),
        "nccl": {"version": nccl_version(), "config_files": nccl_config_files()},
        "topology": topology(),
        "process": process_info().as_dict(),
        "peaks": peaks_used(plat, cpu_clock_ghz),
    }
