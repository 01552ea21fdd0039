"""AMD's AITER (ROCm/aiter, PyPI distribution `amd-aiter`, import name `aiter`): its FlashAttention-style
`aiter.flash_attn_func`. ROCm only. Facts from ROCm/aiter at e4048607 (2026-08), aiter/ops/mha.py and
aiter/jit/core.py:

- `flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1, 0), ...)`,
  layout (batch, seqlen, nheads, headdim), GQA by K/V with fewer heads, causal aligned bottom-right, the same
  docstring as FlashAttention's: the mask mapping is flash_attn.mask_arguments's, the window with a third element,
  the sink size 0 (`window_size=(-1, -1, 0),  # -1 means infinite context window, 0 means no sink`).
- `deterministic=True` by default, in aiter/ops/mha.py and in aiter/ops/triton/attention/mha.py alike, where
  FlashAttention's default is False: xmfu passes `workload.deterministic` (default false) to both libraries.
- Which kernels: `if not ENABLE_CK:` it calls AITER's Triton attention (aiter.ops.triton.attention.mha), else its
  CK/assembly path (FlashAttnFunc); ENABLE_CK is `int(os.environ.get("ENABLE_CK", "1")) != 0` (jit/core.py). With
  AITER_TRITON_ONLY=1 `import aiter` skips the CK/HIP ops and aiter.flash_attn_func is absent; the Triton one is
  then called from aiter.ops.triton.attention.mha (its window_size has two elements).
- The distribution named `aiter` on PyPI (0.13.20191203, "Useful patterns building upon asynchronous iterators")
  installs the same import name with no attention at all (azip, join_aiters, ...): it is told apart by its
  distribution name and by the API, and the row says which one is installed.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from typing import Any

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.attention.flash_attn import DTYPES, mask_arguments
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_modes import prepare_torch

INSTALL = "pip install amd-aiter, or build ROCm/aiter"
TRITON_MHA = "aiter.ops.triton.attention.mha"


def _wrong_package(distributions: list[str], module: Any = None) -> str:
    named = ", ".join(distributions) or "unknown distribution"
    version = getattr(module, "__version__", None)
    return (f"the installed `aiter` ({named}{f' {version}' if version else ''}) is not AMD's AITER: it has no "
            "flash_attn_func (PyPI's `aiter` is an unrelated asynchronous-iterator library); "
            f"{INSTALL}")


def installed() -> str | None:
    """Why AMD's AITER is not what `import aiter` would give, without importing it (an import builds kernels)."""
    if importlib.util.find_spec("aiter") is None:
        return f"aiter is not installed ({INSTALL})"
    owners = importlib.metadata.packages_distributions().get("aiter", [])
    if owners and not any(name.lower().replace("_", "-") == "amd-aiter" for name in owners):
        return _wrong_package(owners)
    return None


def library() -> tuple[Any, dict[str, str]] | str:
    """AITER's flash_attn_func and the notes naming the kernels it runs, or why there is none (imports aiter)."""
    why = installed()
    if why:
        return why
    try:
        aiter = importlib.import_module("aiter")
    except Exception as exc:
        return f"aiter does not import: {type(exc).__name__}: {str(exc)[:200]}"
    try:
        version = importlib.metadata.version("amd-aiter")
    except importlib.metadata.PackageNotFoundError:
        version = str(getattr(aiter, "__version__", "unknown"))
    notes = {"library": "aiter (AMD AITER)", "library_version": version}
    if callable(getattr(aiter, "flash_attn_func", None)):
        core = importlib.import_module("aiter.jit.core")
        ck = bool(getattr(core, "ENABLE_CK", True))
        notes["kernel"] = "CK/assembly (aiter.ops.mha, ENABLE_CK=1)" if ck else f"Triton ({TRITON_MHA}, ENABLE_CK=0)"
        return aiter.flash_attn_func, {**notes, "window_elements": "3" if ck else "2"}
    try:
        triton_mha = importlib.import_module(TRITON_MHA)
    except ImportError:
        return _wrong_package(importlib.metadata.packages_distributions().get("aiter", []), aiter)
    if not callable(getattr(triton_mha, "flash_attn_func", None)):
        return _wrong_package(importlib.metadata.packages_distributions().get("aiter", []), aiter)
    return triton_mha.flash_attn_func, {**notes, "kernel": f"Triton ({TRITON_MHA}, AITER_TRITON_ONLY=1)",
                                        "window_elements": "2"}


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    kind = ctx.platform.kind
    if kind != "rocm":
        wrong = installed()
        also = f" (besides: {wrong})" if wrong and "not AMD's AITER" in wrong else ""
        return False, f"AITER runs on AMD GPUs (ROCm) only; this is a {kind} device{also}"
    why = torch_unavailable(case.dtype, kind, ctx.device.arch)
    if why:
        return False, why
    if case.dtype not in DTYPES:
        return False, f"AITER's flash_attn_func takes fp16 and bf16 (fp8 has its own entry point), not {case.dtype}"
    kwargs, why = mask_arguments(case)
    if kwargs is None:
        return False, why.replace("FlashAttention", "AITER (FlashAttention's convention)", 1)
    found = library()
    return (False, found) if isinstance(found, str) else (True, "")


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    found = library()
    if isinstance(found, str):
        raise Unavailable(found)
    flash_attn_func, notes = found
    kwargs, mask = mask_arguments(case)
    if kwargs is None:
        raise Unavailable(mask)
    if "window_size" in kwargs and notes["window_elements"] == "3":
        kwargs["window_size"] = (*kwargs["window_size"], 0)  # no sink
    # AITER's default is deterministic=True (both flash_attn_funcs), FlashAttention's False: passed explicitly, so
    # the two libraries' backward rows time the same mode (workload.deterministic, recorded in the row)
    kwargs.update(softmax_scale=case.scale, deterministic=case.deterministic)

    def attend(q, k, v):
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kwargs)
        return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)

    notes = {**notes, "mask": mask, "call_layout": "B,S,H,D (transposed views, no copy)",
             "deterministic": case.deterministic}
    return prepare_torch(case, ctx, attend, notes)
