"""The software settings that decide how fast the same GEMM or attention runs on each vendor's stack.

On AMD the realized speed depends on settings a CUDA user never touches: PyTorch TunableOp (tuned GEMM
solutions, their results file), the hipBLASLt/rocBLAS/CK preference, and the flash-attention library behind
SDPA (AOTriton or CK). On NVIDIA: the cuBLAS/cuBLASLt preference, the cuBLASLt workspace, the cuDNN switches.
`torch_settings` records all of them as torch reports them (torch 2.13: torch/backends/cuda/__init__.py,
torch/backends/cudnn/__init__.py, torch/cuda/tunable.py), so "ROCm with tuning" and "ROCm out of the box" are
two labelled figures, and `tunableop_*` drive the tuning pass of `rocm.tunableop=true`.

Every read is lazy and tolerant: a torch without the API (an older release, a CPU build) gives None.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

# Environment variables torch reads for these choices (torch docs: "CUDA environment variables",
# "TunableOp", torch/backends/cuda/__init__.py docstrings).
STACK_ENV = ("PYTORCH_TUNABLEOP_ENABLED", "PYTORCH_TUNABLEOP_TUNING", "PYTORCH_TUNABLEOP_FILENAME",
             "PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS", "PYTORCH_TUNABLEOP_MAX_TUNING_ITERATIONS",
             "TORCH_BLAS_PREFER_HIPBLASLT", "TORCH_BLAS_PREFER_CUBLASLT", "TORCH_ROCM_FA_PREFER_CK",
             "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "HIPBLASLT_WORKSPACE_SIZE",
             "TORCH_CUDNN_V8_API_DISABLED", "TORCH_CUDNN_SDPA_ENABLED", "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT")
# Every variable of AMD's math libraries, whatever its name: hipBLASLt (HIPBLASLT_ALLOW_TF32 gated tf32 in torch's
# Context.cpp, machine/tf32.py; HIPBLASLT_WORKSPACE_SIZE...), rocBLAS (ROCBLAS_LAYER, tuning files...), MIOpen
# (MIOPEN_FIND_MODE, MIOPEN_USER_DB_PATH...): each can change the kernel a GEMM or convolution gets.
STACK_ENV_PREFIXES = ("HIPBLASLT_", "ROCBLAS_", "MIOPEN_")


# The frameworks whose version a row records: a module name that is also its distribution's name, so the version
# is read from the same installed metadata environment.json's `packages` is (environment.package_versions).
FRAMEWORK_PACKAGES = ("torch", "jax", "jaxlib", "triton")


@functools.cache
def _installed(name: str) -> str | None:
    from importlib import metadata  # here: readers of bundles import this module and never ask (19 ms a start)

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:  # a module from another distribution (pytorch-triton's triton)
        return None


def loaded_versions() -> dict[str, str]:
    """The installed versions of the frameworks this process has imported when a row is written: the row's own
    statement of the stack it ran on, which `xmfu validate` holds against environment.json's `packages` (an
    environment edited after the run, torch said to be 9.9.9, no longer agrees with its rows)."""
    return {name: version for name in FRAMEWORK_PACKAGES
            if name in sys.modules and (version := _installed(name)) is not None}


def stack_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k in STACK_ENV or k.startswith(STACK_ENV_PREFIXES)}


def _read(fn: Callable[[], Any]) -> Any:
    """A setting as torch reports it (enums by name), or None where this torch has no such API."""
    try:
        value = fn()
    except Exception:  # AttributeError on older torch, RuntimeError on a build without the library
        return None
    return getattr(value, "name", value)


def tunableop_state(torch: Any) -> dict[str, Any]:
    tunable = getattr(torch.cuda, "tunable", None)
    if tunable is None:
        return {"available": False}
    return {"available": True, "enabled": _read(tunable.is_enabled), "tuning": _read(tunable.tuning_is_enabled),
            "filename": _read(tunable.get_filename), "max_tuning_duration_ms": _read(tunable.get_max_tuning_duration),
            "max_tuning_iterations": _read(tunable.get_max_tuning_iterations)}


def torch_settings(platform_kind: str, torch: Any = None) -> dict[str, Any] | None:
    """The BLAS, attention, cuDNN and TunableOp settings in force now; None off GPUs or without torch."""
    if torch is None:
        torch = sys.modules.get("torch")
    if torch is None or platform_kind not in ("cuda", "rocm"):
        return None
    b = torch.backends
    out: dict[str, Any] = {
        "blas_library": _read(lambda: b.cuda.preferred_blas_library()),
        "matmul_allow_tf32": _read(lambda: b.cuda.matmul.allow_tf32),
        "matmul_fp32_precision": _read(lambda: b.cuda.matmul.fp32_precision),
        "matmul_bf16_reduced_precision_reduction": _read(lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction),
        "sdpa_enabled": {name: _read(getattr(b.cuda, f"{name}_sdp_enabled", lambda: None))
                         for name in ("flash", "mem_efficient", "math", "cudnn")},
        "cudnn": {"enabled": _read(lambda: b.cudnn.enabled), "benchmark": _read(lambda: b.cudnn.benchmark),
                  "allow_tf32": _read(lambda: b.cudnn.allow_tf32), "version": _read(lambda: b.cudnn.version())},
        "tunableop": tunableop_state(torch),
        "env": stack_env(),
    }
    if platform_kind == "rocm":
        out["rocm_flash_attention_library"] = _read(lambda: b.cuda.preferred_rocm_fa_library())
        out["ck_sdpa_available"] = _read(getattr(b.cuda, "is_ck_sdpa_available", lambda: None))
    return out


def tunableop_start(torch: Any, scratch_file: str, max_tuning_ms: int | None = None) -> dict[str, Any]:
    """Switch TunableOp on with tuning (torch/cuda/tunable.py: enable, tuning_enable, set_filename,
    set_max_tuning_duration). torch itself writes its results file when the process exits, after the bundle's
    checksums, so that file goes to `scratch_file` outside the bundle; `tunableop_results` exports the same
    table into the bundle. Returns the state it set."""
    tunable = torch.cuda.tunable
    tunable.enable(True)
    tunable.tuning_enable(True)
    tunable.set_filename(scratch_file, False)
    if max_tuning_ms:
        tunable.set_max_tuning_duration(int(max_tuning_ms))
    return tunableop_state(torch)


def tunableop_results(torch: Any) -> str:
    """The tuned solutions as TunableOp's own CSV: `Validator,<key>,<value>` lines, then one
    `<op signature>,<params signature>,<solution>,<time ms>` line per tuned GEMM (the file format in the
    torch.cuda.tunable documentation), from tunable.get_validators() and tunable.get_results()."""
    tunable = torch.cuda.tunable
    lines = [f"Validator,{key},{value}" for key, value in (_read(tunable.get_validators) or ())]
    lines += [",".join(str(part) for part in result) for result in (_read(tunable.get_results) or ())]
    return "\n".join(lines) + "\n"
