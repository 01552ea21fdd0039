"""FlashAttention (Dao-AILab/flash-attention): `flash_attn.flash_attn_func` (FlashAttention-2), or FlashAttention-3's
`flash_attn_interface.flash_attn_func` (the hopper/ build, package flash_attn_3) on Hopper (sm90) when installed.
GPU only: the package has no CPU kernels. Facts from flash-attention at 2.8.4 (flash_attn/__init__.py
__version__), read in flash_attn/flash_attn_interface.py, csrc/flash_attn/flash_api.cpp, hopper/flash_attn_interface.py
and hopper/setup.py.

- Layout (batch, seqlen, nheads, headdim); GQA/MQA by passing K/V with fewer heads ("head 0, 1, 2 of Q will
  attention to head 0 of K, V": query head h reads kv head h // group, xmfu's grouping). xmfu's (B, H, S, D) tensors
  go in as transposed views (flash_api.cpp only checks `stride(-1) == 1`), no copy.
- Causal is aligned bottom-right ("If causal=True, the causal mask is aligned to the bottom right corner"), xmfu's
  `bottom_right`; with seq_q == seq_kv both alignments are the same mask. Top-left with seq_q > seq_kv is the local
  window (-1, seq_q - seq_kv): query i sees keys up to i + seq_kv - seq_q + window_right = i. Top-left with
  seq_q < seq_kv would need a negative right window, which FlashAttention reads as infinite (flash_api.cpp:
  `if (window_size_left >= 0 && window_size_right < 0) { window_size_right = seqlen_k; }`): skipped.
- fp16 and bf16 only ("FlashAttention only supports fp16 and bf16 data type"), head_dim a multiple of 8 and at most
  256, compute capability 8.0+ ("FlashAttention only supports Ampere GPUs or newer").
- `deterministic=False` is both FA2's and FA3's default (the backward's deterministic mode, "slightly slower and
  uses more memory"); AITER's is True. xmfu passes `workload.deterministic` to every one of them and records it.
- On ROCm, flash_attn_2_cuda is the Composable Kernel build (csrc/flash_attn_ck); with
  FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE, or when that extension is missing, flash_attn_interface imports AITER's
  Triton kernels instead and says so in its module global USE_TRITON_ROCM, which the row records.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from typing import Any

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_modes import prepare_torch

DTYPES = ("fp16", "bf16")
MAX_HEAD_DIM = 256
INSTALL = "pip install flash-attn; FlashAttention-3: build hopper/ of Dao-AILab/flash-attention"


def mask_arguments(case: AttentionCase) -> tuple[dict[str, Any] | None, str]:
    """FlashAttention's causal/window_size arguments for `case` and what they mean, or (None, why not)."""
    if not case.causal:
        return {"causal": False}, "no mask"
    if case.seq_q == case.seq_kv or case.alignment == "bottom_right":
        return {"causal": True}, "causal=True (bottom-right)"
    if case.seq_q > case.seq_kv:
        return ({"causal": False, "window_size": (-1, case.seq_q - case.seq_kv)},
                f"top-left as the local window (-1, {case.seq_q - case.seq_kv})")
    return None, ("FlashAttention aligns causal masks bottom-right, and top-left with seq_q < seq_kv would need a "
                  "negative right window, which it reads as infinite; use alignment=bottom_right")


def _case_refused(case: AttentionCase, library: str) -> str | None:
    if case.dtype not in DTYPES:
        return f"{library} takes fp16 and bf16 only, not {case.dtype}"
    if case.head_dim % 8 or case.head_dim > MAX_HEAD_DIM:
        return f"{library} needs head_dim a multiple of 8 and at most {MAX_HEAD_DIM}, not {case.head_dim}"
    kwargs, why = mask_arguments(case)
    return why if kwargs is None else None


def _version(module: Any, distributions: tuple[str, ...]) -> str:
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return str(getattr(module, "__version__", "unknown"))


def _hopper(ctx: RunContext) -> bool:
    cc = ctx.device.compute_capability
    return ctx.platform.kind == "cuda" and cc is not None and cc.split(".")[0] == "9"


def library(ctx: RunContext) -> tuple[Any, dict[str, str]] | str:
    """The flash_attn_func to call and the notes naming it, or why there is none. FA3 on Hopper when installed."""
    if _hopper(ctx) and importlib.util.find_spec("flash_attn_interface") is not None:
        try:
            fa3 = importlib.import_module("flash_attn_interface")
        except ImportError as exc:
            return f"flash_attn_interface (FlashAttention-3) is installed but does not import: {exc}"
        if callable(getattr(fa3, "flash_attn_func", None)):
            return fa3.flash_attn_func, {"library": "flash_attn_interface (FlashAttention-3)",
                                         "library_version": _version(fa3, ("flash_attn_3", "flash-attn-3")),
                                         "kernel": "flash_attn_3._C (sm90)"}
    if importlib.util.find_spec("flash_attn") is None:
        return f"flash_attn is not installed ({INSTALL})"
    try:
        fa2 = importlib.import_module("flash_attn.flash_attn_interface")
        version = _version(importlib.import_module("flash_attn"), ("flash_attn", "flash-attn"))
    except ImportError as exc:
        return f"flash_attn is installed but does not import: {exc}"
    if ctx.platform.kind == "rocm":
        triton = getattr(fa2, "USE_TRITON_ROCM", False)
        kernel = ("Triton (AITER's flash_attn_triton_amd; FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE or no CK build)"
                  if triton else "Composable Kernel (flash_attn_2_cuda, csrc/flash_attn_ck)")
    else:
        kernel = "flash_attn_2_cuda (CUDA)"
    return fa2.flash_attn_func, {"library": "flash_attn (FlashAttention-2)", "library_version": version,
                                 "kernel": kernel}


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    kind = ctx.platform.kind
    if kind not in ("cuda", "rocm"):
        return False, f"FlashAttention runs on NVIDIA and AMD GPUs only; this is a {kind} device"
    why = torch_unavailable(case.dtype, kind, ctx.device.arch)
    if why:
        return False, why
    cc = ctx.device.compute_capability
    if kind == "cuda" and cc is not None and int(cc.split(".")[0]) < 8:
        return False, f"FlashAttention needs compute capability 8.0+ (Ampere or newer), this device is {cc}"
    why = _case_refused(case, "FlashAttention")
    if why:
        return False, why
    found = library(ctx)
    return (False, found) if isinstance(found, str) else (True, "")


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    found = library(ctx)
    if isinstance(found, str):
        raise Unavailable(found)
    flash_attn_func, notes = found
    kwargs, mask = mask_arguments(case)
    if kwargs is None:
        raise Unavailable(mask)
    # the backward's deterministic mode, passed explicitly: AITER's default differs (workloads/attention/amd_aiter.py)
    kwargs.update(softmax_scale=case.scale, deterministic=case.deterministic)

    def attend(q, k, v):
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kwargs)
        out = out[0] if isinstance(out, tuple) else out  # FA3 before 3.0 stable returned (out, softmax_lse)
        return out.transpose(1, 2)

    notes = {**notes, "mask": mask, "call_layout": "B,S,H,D (transposed views, no copy)",
             "deterministic": case.deterministic}
    return prepare_torch(case, ctx, attend, notes)
