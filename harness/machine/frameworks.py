"""Moving xmfu's seeded numpy inputs into each framework, and results back, in one place.

Imports are lazy: a framework that is not installed only matters to the backends that use it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from harness.machine.dtypes import DTYPES, FP8_FORMATS

TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
TORCH_FP8 = {"e4m3fn": "float8_e4m3fn", "e4m3fnuz": "float8_e4m3fnuz"}  # by fp8 format (machine/dtypes.py)


def torch_dtype(dtype: str, fp8: str | None = None) -> Any:
    """The torch dtype of `dtype`; fp8 needs its format (e4m3fn or e4m3fnuz), never a guessed one."""
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


def to_jax(x: np.ndarray, dtype: str, device: Any) -> Any:
    import jax

    return jax.device_put(np.asarray(x).astype(DTYPES[dtype].storage), device)


def jax_rows(x: Any, rows: np.ndarray | None) -> np.ndarray:
    host = np.asarray(x).astype(np.float64)
    return host if rows is None else host[rows]


def torch_unavailable(dtype: str, platform_kind: str) -> str | None:
    """Why a torch backend cannot run `dtype` here, or None."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    if dtype == "tf32" and platform_kind not in ("cuda", "rocm"):
        return f"tf32 needs GPU tensor cores; a {platform_kind} device has none"
    return None


def jax_unavailable(platform_kind: str) -> str | None:
    """Why a JAX backend cannot run here, or None. Sets up GPU memory sharing before jax is imported."""
    import importlib.util

    share_device_memory()
    if platform_kind == "cpu":  # a CPU run needs no accelerator plugin probing (and its warnings)
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if importlib.util.find_spec("jax") is None:
        return "jax is not installed (pip install 'xmfu[jax]')"
    initialize_jax_distributed(platform_kind)
    ok, why = jax_backend_matches(platform_kind)
    return None if ok else why


def initialize_jax_distributed(platform_kind: str) -> None:
    """Join the processes of a multi-process run (torchrun's or Slurm's environment) with
    jax.distributed, before JAX first touches a device. The coordinator listens on MASTER_PORT + 1, beside
    torch's store. No-op for one process or when already done."""
    from harness.machine.ranks import process_info

    proc = process_info()
    if proc.world_size < 2 or os.environ.get("XMFU_JAX_DISTRIBUTED") == "1":
        return
    import jax

    if platform_kind == "cpu":  # CPU devices of different processes talk through gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    address = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{int(os.environ.get('MASTER_PORT', '29500')) + 1}"
    jax.distributed.initialize(coordinator_address=address, num_processes=proc.world_size,
                               process_id=proc.rank)
    os.environ["XMFU_JAX_DISTRIBUTED"] = "1"


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


def release_cached_memory() -> None:
    """Hand torch's cached GPU blocks back between cases so the next backend or shape can have them."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


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
    for package in ("torch", "triton"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed (pip install 'xmfu[triton]')"
    if platform_kind == "cpu" and not use_triton_interpreter():
        return TRITON_IMPORTED_TOO_EARLY
    return None
