"""The GPU driver version, asked of the driver's own library first, and where it came from.

NVIDIA: NVML nvmlSystemGetDriverVersion (nvidia-ml-py pynvml), else `nvidia-smi --query-gpu=driver_version`.
AMD: amdsmi_get_gpu_driver_info(handle)["driver_version"] (amdsmi py-interface, every release since 6.1;
7.0 says "N/A" for an empty one), else the amdgpu kernel module's /sys/module/amdgpu/version (present for the
DKMS driver), else the "Driver version:" line of `rocm-smi --showdriverversion`, whose output starts with blank
lines and a banner, so its first line is never the version.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

AMDGPU_VERSION = Path("/sys/module/amdgpu/version")
NVIDIA_SMI = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
ROCM_SMI = ["rocm-smi", "--showdriverversion"]


def _clean(value: Any) -> str | None:
    text = value.decode() if isinstance(value, bytes) else str(value or "")
    text = text.strip()
    return None if text in ("", "N/A") else text


def _command(cmd: list[str], which: Callable[[str], str | None], run: Callable[..., Any]) -> str | None:
    if not which(cmd[0]):
        return None
    try:
        return run(cmd, capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None


def _nvidia(nvml: Any, which: Callable[[str], str | None], run: Callable[..., Any]) -> tuple[str | None, str]:
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        found = _clean(nvml.nvmlSystemGetDriverVersion())
        if found:
            return found, "nvmlSystemGetDriverVersion"
        why = "nvmlSystemGetDriverVersion gave nothing"
    except Exception as exc:  # no nvidia-ml-py, no libnvidia-ml.so.1, driver not loaded
        why = f"NVML: {type(exc).__name__}: {exc}"
    out = _command(NVIDIA_SMI, which, run)
    lines = out.strip().splitlines() if out else []
    if lines and _clean(lines[0]):
        return _clean(lines[0]), "nvidia-smi --query-gpu=driver_version"
    return None, f"{why}; nvidia-smi gave no driver version"


def _amd_smi(amdsmi: Any) -> tuple[str | None, str]:
    try:
        if amdsmi is None:
            import amdsmi
        amdsmi.amdsmi_init()
        handle = amdsmi.amdsmi_get_processor_handles()[0]
        found = _clean(amdsmi.amdsmi_get_gpu_driver_info(handle).get("driver_version"))
        return found, "amdsmi_get_gpu_driver_info" if found else "amdsmi_get_gpu_driver_info gave N/A"
    except Exception as exc:  # no amdsmi, no libamd_smi.so, no GPU
        return None, f"amdsmi: {type(exc).__name__}: {exc}"


def _amd(amdsmi: Any, sysfs: Path, which: Callable[[str], str | None],
         run: Callable[..., Any]) -> tuple[str | None, str]:
    found, why = _amd_smi(amdsmi)
    if found:
        return found, why
    try:
        version = _clean(sysfs.read_text())
        if version:
            return version, str(AMDGPU_VERSION)
    except OSError:
        pass
    out = _command(ROCM_SMI, which, run) or ""
    for line in out.splitlines():
        if line.strip().lower().startswith("driver version:") and _clean(line.split(":", 1)[1]):
            return _clean(line.split(":", 1)[1]), "rocm-smi --showdriverversion"
    return None, f"{why}; no {AMDGPU_VERSION}; no 'Driver version:' from rocm-smi"


def driver_version(kind: str, nvml: Any = None, amdsmi: Any = None, sysfs: Path = AMDGPU_VERSION,
                   which: Callable[[str], str | None] = shutil.which,
                   run: Callable[..., Any] = subprocess.run) -> tuple[str | None, str]:
    """(version or None, the source it came from, or why there is none) for a platform kind."""
    if kind == "cuda":
        return _nvidia(nvml, which, run)
    if kind == "rocm":
        return _amd(amdsmi, sysfs, which, run)
    return None, f"no GPU driver on a {kind} platform"
