"""Moving xmfu's seeded numpy inputs into each framework, and results back, in one place.

Imports are lazy: a framework that is not installed only matters to the backends that use it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from xmfu.harness.machine import compat, torch_device
from xmfu.harness.machine.dtypes import FP8_FORMATS, storage
from xmfu.harness.machine.tf32 import rocm_tf32_unavailable

TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# by fp8 format (machine/dtypes.py FP8_FORMATS)
TORCH_FP8 = {"e4m3fn": "float8_e4m3fn", "e4m3fnuz": "float8_e4m3fnuz", "e5m2": "float8_e5m2"}


def torch_dtype(dtype: str, fp8: str | None = None) -> Any:
    """The torch dtype of `dtype`; fp8 needs its format (machine/dtypes.FP8_FORMATS), never a guessed one."""
    import torch

    if dtype != "fp8":
        return getattr(torch, TORCH_DTYPES[dtype])
    if fp8 not in TORCH_FP8:
        raise ValueError(f"fp8 needs a format ({', '.join(FP8_FORMATS)}), got {fp8!r}")
    return getattr(torch, TORCH_FP8[fp8])


def to_torch(x: np.ndarray, dtype: str, device: str, fp8: str | None = None) -> Any:
    """A float32 numpy array (already rounded to `dtype`) as a torch tensor of `dtype` on `device`."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(x)).to(device=device).to(torch_dtype(dtype, fp8))


def torch_rows(t: Any, rows: np.ndarray | None) -> np.ndarray:
    """float64 host copy of `t` (or of its `rows`); rows are selected on the device to move less."""
    import torch

    if rows is not None:
        t = t[torch.as_tensor(rows, device=t.device)]
    return t.to(torch.float64).cpu().numpy()


def to_jax(x: np.ndarray, dtype: str, device: Any, fp8: str | None = None) -> Any:
    """`x` as a JAX array of `dtype` on `device`; fp8 needs its format (machine/dtypes.FP8_FORMATS), never a
    guessed one."""
    import jax

    return jax.device_put(np.asarray(x).astype(storage(dtype, fp8)), device)


def jax_rows(x: Any, rows: np.ndarray | None) -> np.ndarray:
    host = np.asarray(x).astype(np.float64)
    return host if rows is None else host[rows]


def make_torch_device_current(device: str) -> None:
    """Make `device` ("cuda:N", ROCm too) torch's current device; nothing for "cpu". torch's events,
    synchronize() and graph captures act on the current device (torch 2.13: torch.cuda.synchronize(None) uses
    current_device(), torch/cuda/__init__.py; Event.record(None) uses current_stream(), torch/cuda/streams.py),
    and Triton launches on it (triton/runtime/jit.py: driver.active.get_current_device()); a rank or a
    `device_index` other than 0 would otherwise work or time on cuda:0 while its tensors live elsewhere. Another
    accelerator ("xpu:N", "neuron:N"...) goes through torch.accelerator (machine/torch_device.py)."""
    if device == "cpu" or device.startswith("cpu:"):
        return
    import torch

    torch_device.set_device(torch, device)  # "cuda:N": torch.cuda.set_device, as always


def torch_unavailable(dtype: str, platform_kind: str, arch: str | None = None) -> str | None:
    """Why a torch backend cannot run `dtype` here, or None. `arch`: the AMD part's gcnArchName, which decides
    whether it has TF32 matrix units (tf32.py)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    why = compat.too_old("torch")  # before anything imports it: an older torch may lack what xmfu calls
    if why:
        return why
    if platform_kind in ("cuda", "rocm"):
        why = _torch_gpu_mismatch(platform_kind)
        if why:
            return why
    elif platform_kind != "cpu":
        why = _torch_accelerator_mismatch(platform_kind)
        if why:
            return why
    if dtype == "tf32" and platform_kind not in ("cuda", "rocm"):
        return f"tf32 needs GPU tensor cores; a {platform_kind} device has none"
    if dtype == "tf32" and platform_kind == "rocm":
        return rocm_tf32_unavailable(arch)
    return None


def _torch_gpu_mismatch(platform_kind: str) -> str | None:
    """A GPU found through JAX may be one torch cannot drive (a CPU-only or other-vendor torch build)."""
    import torch

    if not torch.cuda.is_available():  # CUDA/ROCm only (other accelerators: _torch_accelerator_mismatch)
        return f"this torch build sees no GPU, but the run measures a {platform_kind} device (found through JAX)"
    built_for = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if built_for != platform_kind:
        return f"this torch is a {built_for} build and the run measures a {platform_kind} device"
    return None


def _torch_accelerator_mismatch(platform_kind: str) -> str | None:
    """A device torch does not drive (a TPU found through JAX beside a torch without TorchTPU, say): torch would
    run on the host and be compared with the device's peak."""
    import torch

    device_type = torch_device.accelerator_type(torch)
    drives = torch_device.platform_kind(torch, device_type)[0] if device_type else None
    if drives != platform_kind:
        return (f"torch does not drive the {platform_kind} device here (its accelerator: {drives or 'none'}; "
                f"{platform_kind} needs the vendor's torch backend)")
    return None


# What a JAX backend's peak memory is: JAX has no call that resets the allocator's high-water mark
# (Device.memory_stats()["peak_bytes_in_use"] on GPUs and TPUs), so it is the process's so far and an earlier,
# larger case of the same run can set it. Rows say so in `peak_memory_source`.
JAX_PEAK_SOURCE = "device allocator peak since the process started (JAX cannot reset it: earlier cases count)"


def local_jax_device(index: int | None = None) -> Any:
    """The device this process measures with JAX: its first local device, or local device `index` (the run's
    `device_index`).

    In a multi-process GPU run each process is pinned to its own GPU (above), so that is the one; jax.devices()
    lists every process's devices, and indexing it by the local rank would pick another process's GPU. A pinned
    process sees one device only: asking it for another is an error, never a silent substitute.
    """
    import jax

    devices = jax.local_devices()
    if index is None:
        return devices[0]
    if index >= len(devices):
        raise RuntimeError(f"device_index {index}: JAX sees {len(devices)} local device(s) in this process "
                           "(a process of a multi-process run is pinned to its own GPU)")
    return devices[index]


def jax_backend_matches(platform_kind: str) -> tuple[bool, str]:
    """JAX must run on the device the run measures: a CPU-only jaxlib on a GPU host would time the host."""
    import jax

    backend = jax.default_backend()
    wanted = {"cuda": ("gpu", "cuda"), "rocm": ("gpu", "rocm"), "tpu": ("tpu",), "cpu": ("cpu",)}[platform_kind]
    if backend in wanted:
        return True, ""
    return False, (f"jax runs on '{backend}' but this run measures a {platform_kind} device; "
                   f"install the jax build for {platform_kind} (e.g. jax[cuda12]) or run with device=cpu")


def xla_cost_flops(compiled: Any) -> float | None:
    """XLA's own FLOP estimate of a compiled program, kept beside the analytic count as a cross-check.

    Best effort: some backends return nothing, and XLA counts elementwise work the conventions leave out.
    """
    try:
        cost = compiled.cost_analysis()
    except Exception:  # not implemented on every backend
        return None
    cost = cost[0] if isinstance(cost, list) and cost else cost
    return float(cost["flops"]) if isinstance(cost, dict) and "flops" in cost else None


def share_device_memory() -> None:
    """Let JAX and torch share one GPU: JAX otherwise grabs 75% of its memory on first use.

    Must run before jax is first imported; a value the user set is kept.
    """
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


# torch's profiler (kineto) writes `USDT:... profiler_start` and `profiler_stop` to stderr at every profile() (libkineto
# Logger.h: USDT_EMIT_START_TRACE, a LOG of its own USDT severity): 40 lines in an attention run, which profiles each
# SDPA case to name its kernel. Its level is read from KINETO_LOG_LEVEL when the profiler first starts in the process;
# with torch 2.13, 5 still printed them and 6 did not (USDT is kineto's highest severity, so 6 also silences its
# warnings and errors: what xmfu reads from a profile, op names and traces, it checks itself). A value the user
# set is kept.
KINETO_QUIET = "6"


def quiet_torch_profiler() -> None:
    """Before the first torch.profiler.profile of the process: kineto's start/stop lines off (KINETO_QUIET)."""
    os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)


def release_cached_memory() -> None:
    """Hand torch's cached accelerator blocks back between cases so the next backend or shape can have them. CUDA
    and ROCm as before (torch.cuda.empty_cache once CUDA is initialised); another accelerator through
    machine/torch_device.py (torch.accelerator.empty_cache, 2.8+, itself a no-op before its allocator exists)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    # on a CUDA/ROCm build torch.accelerator.is_available() delegates to torch.cuda.is_available() (torch 2.13
    # torch/accelerator/__init__.py: get_device_module(current_accelerator()).is_available()); before torch had
    # torch.accelerator, accelerator_type asks torch.cuda.is_available() itself
    device_type = torch_device.accelerator_type(torch)
    if device_type == "cuda":
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    elif device_type is not None:
        torch_device.empty_cache(torch, device_type)


TRITON_IMPORTED_TOO_EARLY = ("triton was imported before xmfu could switch on its interpreter; "
                             "start the run with TRITON_INTERPRET=1 in the environment")
TRITON_INTERPRETER_NOTE = "Triton interpreter on a CPU: the result is checked, its time says nothing about hardware"


def use_triton_interpreter() -> bool:
    """Switch Triton to its interpreter (for a CPU run); only possible before triton is first imported.

    Triton decorates its own library functions (tl.cdiv...) when it is imported, in the mode the environment
    says then; a kernel interpreted later would call them compiled and fail.
    """
    if "triton" in sys.modules:
        # Too late to choose: say what triton was imported as (its library functions show the mode), and keep
        # the variable in line with it (a restored environment may have dropped it since).
        interpreted = triton_imported_interpreted()
        if interpreted:
            os.environ["TRITON_INTERPRET"] = "1"
        return interpreted
    os.environ["TRITON_INTERPRET"] = "1"
    return True


def triton_imported_interpreted() -> bool:
    """Whether the imported triton decorated its library in interpreter mode (tl.cdiv is then an
    InterpretedFunction instead of a JITFunction: triton/runtime/interpreter.py, triton/language/core.py)."""
    language = sys.modules.get("triton.language")
    return language is not None and type(getattr(language, "cdiv", None)).__name__ == "InterpretedFunction"


def triton_unavailable(platform_kind: str) -> str | None:
    """Why Triton cannot run here, or None. Looks packages up without importing triton (see above)."""
    import importlib.util

    if platform_kind == "tpu":
        return "Triton does not target TPUs"
    for package in ("torch", "triton"):  # xmfu's Triton kernels take torch tensors: each is its own extra
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed (pip install 'xmfu[{package}]')"
    why = compat.too_old("triton")
    if why:
        return why
    if platform_kind in ("cuda", "rocm"):  # xmfu's Triton kernels take torch's GPU tensors
        why = _torch_gpu_mismatch(platform_kind)
        if why:
            return why
    if platform_kind == "cpu":
        if not use_triton_interpreter():
            return TRITON_IMPORTED_TOO_EARLY
        return compat.triton_interpreter_too_old()
    return None
