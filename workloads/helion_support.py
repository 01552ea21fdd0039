"""What xmfu's Helion backends (matmul/helion.py, attention/helion.py) share: whether helion can run here, the
kernel settings for a GPU or Triton's interpreter, and what their rows record. Reads helion 1.5.1's sources
(runtime/settings.py, runtime/kernel.py); helion is imported only where a backend prepares a case."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from contextlib import suppress
from typing import Any

from xmfu.harness.machine.frameworks import triton_unavailable

INSTALL = "pip install 'xmfu[helion]'"
# On a GPU: helion's 'quick' autotune (runtime/settings.py autotune_effort: 'none' | 'quick' | 'full', default
# 'full', which searches for many minutes per shape). The row records the effort and the config that won.
AUTOTUNE_EFFORT = "quick"


def helion_unavailable(platform_kind: str) -> str | None:
    """Why Helion cannot run here, or None. On a CPU, Triton's interpreter must be chosen (TRITON_INTERPRET=1)."""
    if platform_kind == "tpu":
        return "xmfu's Helion backends take torch tensors; helion's Pallas backend for TPUs is not used here"
    if importlib.util.find_spec("helion") is None:
        return f"helion is not installed ({INSTALL})"
    why = triton_unavailable(platform_kind)  # on a CPU: switches Triton to its interpreter, or says why not
    if why:
        return why
    return None


# In Triton's interpreter, fp32 only. Measured here (helion 1.5.1, torch 2.13 CPU, triton 3.9): the matmul kernel at
# 96x80x72 in bf16 gave a relative error of 8e9 where fp32 gave 2e-7, and the attention kernel's
# torch.bmm(..., torch.float32) on bf16 inputs fails helion's tracing on a CPU ("failed while attempting to run meta
# for aten.bmm.dtype"). Low precision is left to GPUs.
INTERPRETER_DTYPES = ("fp32",)


def interpreter_refuses(dtype: str) -> str | None:
    if dtype in INTERPRETER_DTYPES:
        return None
    return (f"xmfu's Helion kernels run only fp32 in Triton's interpreter ({dtype} gives wrong results or fails to "
            "trace there with helion 1.5.1); on a GPU they take bf16 and fp16")


def refusal(dtype: str, dtypes: tuple[str, ...], platform_kind: str, kernel: str) -> str | None:
    """Why xmfu's Helion `kernel` (e.g. "Helion GEMM") cannot run `dtype` here, or None: Helion itself, the
    kernel's dtypes, then what Triton's interpreter takes on a CPU."""
    why = helion_unavailable(platform_kind)
    if why:
        return why
    if dtype not in dtypes:
        return f"xmfu's {kernel} takes {', '.join(dtypes)}, not {dtype}"
    return interpreter_refuses(dtype) if platform_kind == "cpu" else None


def helion_settings(on_cpu: bool, blocks: list[int], dot_precision: str | None) -> dict[str, Any]:
    """helion.kernel keyword arguments: one fixed config in the interpreter (autotuning there would time numpy),
    the quick autotune on a GPU; `dot_precision` where the dtype needs one ("ieee" for fp32)."""
    import helion

    settings: dict[str, Any] = ({"config": helion.Config(block_sizes=blocks)} if on_cpu
                                else {"autotune_effort": AUTOTUNE_EFFORT})
    if dot_precision:
        settings["dot_precision"] = dot_precision
    return settings


def notes_for(settings: dict[str, Any], on_cpu: bool) -> dict[str, Any]:
    try:
        version = importlib.metadata.version("helion")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return {"library": "helion", "library_version": version,
            "autotune": "none: one fixed config (Triton interpreter)" if on_cpu else f"effort {AUTOTUNE_EFFORT}"}


def kernel_config(kernel: Any, args: tuple[Any, ...]) -> str:
    """The config the bound kernel ran (helion runtime/kernel.py: Kernel.bind(args) -> BoundKernel, whose `_config`
    is set once it has compiled), or "not recorded"."""
    with suppress(Exception):
        config = kernel.bind(args)._config
        if config is not None:
            return str(config)
    return "not recorded"
