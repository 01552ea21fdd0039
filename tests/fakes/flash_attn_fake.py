"""Stand-ins for the attention libraries xmfu cannot install here, with the real signatures and mask semantics:

- `flash_attn` 2.8.4 (Dao-AILab/flash-attention flash_attn/__init__.py, flash_attn/flash_attn_interface.py):
  flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
  alibi_slopes=None, deterministic=False, return_attn_probs=False); module global USE_TRITON_ROCM.
- FlashAttention-3's top-level `flash_attn_interface` (hopper/flash_attn_interface.py at the same commit):
  flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
  v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1, pack_gqa=None,
  deterministic=False, sm_margin=0, return_attn_probs=False).
- AMD's `aiter` (ROCm/aiter e4048607, aiter/ops/mha.py): flash_attn_func(q, k, v, dropout_p=0.0,
  softmax_scale=None, causal=False, window_size=(-1, -1, 0), bias=None, alibi_slopes=None, deterministic=True,
  return_lse=False, return_attn_probs=False, how_v3_bf16_cvt=1, cu_seqlens_q=None, cu_seqlens_kv=None,
  sink_ptr=None, num_splits=0); aiter.jit.core.ENABLE_CK.
- PyPI's `aiter` 0.13.20191203 (asynchronous iterators): __version__ and its __all__ names, no attention.

The math follows the documented semantics (layout B, S, H, D; GQA by fewer K/V heads; query i sees keys in
[i + seqlen_k - seqlen_q - window[0], i + seqlen_k - seqlen_q + window[1]], -1 infinite, causal = right window 0),
in torch on whatever device the tensors claim, so a backend's calls can be checked against xmfu's fp64 reference.
Each call's arguments past q, k, v, as the caller named them, are kept in CALLS (the test reads what was passed).
"""

from __future__ import annotations

import sys
import types
from typing import Any

import torch

CALLS: list[dict[str, Any]] = []  # the keyword arguments of each call, in order


def _attention(q, k, v, scale, causal, window):
    _, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    left, right = window[0], window[1]
    if causal:
        right = 0
    qf, kf, vf = (t.transpose(1, 2).float() for t in (q, k, v))
    kf, vf = kf.repeat_interleave(h // hk, 1), vf.repeat_interleave(h // hk, 1)
    s = (qf @ kf.transpose(-1, -2)) * (scale if scale is not None else d**-0.5)
    i = torch.arange(sq)[:, None] + sk - sq
    j = torch.arange(sk)[None, :]
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    s = s.masked_fill(~keep.to(s.device), float("-inf"))
    return (torch.softmax(s, -1) @ vf).to(q.dtype).transpose(1, 2)


def _kept(fn):
    def call(q, k, v, **kwargs):
        CALLS.append(kwargs)
        return fn(q, k, v, **kwargs)

    call.__name__ = fn.__name__
    return call


@_kept
def flash_attn_2_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                      alibi_slopes=None, deterministic=False, return_attn_probs=False):
    assert dropout_p == 0.0 and q.stride(-1) == 1
    return _attention(q, k, v, softmax_scale, causal, window_size)


@_kept
def flash_attn_3_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                      v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                      pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    out = _attention(q, k, v, softmax_scale, causal, window_size)
    return out, torch.zeros(1)  # FA3 3.0.0b1 returned (out, softmax_lse) whatever return_attn_probs said


@_kept
def aiter_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1, 0),
                          bias=None, alibi_slopes=None, deterministic=True, return_lse=False,
                          return_attn_probs=False, how_v3_bf16_cvt=1, cu_seqlens_q=None, cu_seqlens_kv=None,
                          sink_ptr=None, num_splits=0):
    assert len(window_size) == 3
    return _attention(q, k, v, softmax_scale, causal, window_size)


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__spec__ = types.SimpleNamespace(name=name, loader=None, parent=name.rpartition(".")[0],
                                            submodule_search_locations=[])  # find_spec answers from sys.modules
    return module


def install_flash_attn(monkeypatch, *, rocm_triton: bool = False) -> None:
    interface = _module("flash_attn.flash_attn_interface", flash_attn_func=flash_attn_2_func,
                        USE_TRITON_ROCM=rocm_triton)
    package = _module("flash_attn", __version__="2.8.4", flash_attn_func=flash_attn_2_func,
                      flash_attn_interface=interface)
    monkeypatch.setitem(sys.modules, "flash_attn", package)
    monkeypatch.setitem(sys.modules, "flash_attn.flash_attn_interface", interface)


def install_flash_attn_3(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn_interface",
                        _module("flash_attn_interface", flash_attn_func=flash_attn_3_func))


def install_amd_aiter(monkeypatch, *, enable_ck: bool = True) -> None:
    core = _module("aiter.jit.core", ENABLE_CK=enable_ck)
    monkeypatch.setitem(sys.modules, "aiter", _module("aiter", flash_attn_func=aiter_flash_attn_func))
    monkeypatch.setitem(sys.modules, "aiter.jit", _module("aiter.jit", core=core))
    monkeypatch.setitem(sys.modules, "aiter.jit.core", core)


def install_pypi_aiter(monkeypatch) -> None:
    names = ["active_aiter", "aiter_forker", "aiter_to_iter", "azip", "flatten_aiter", "gated_aiter",
             "iter_to_aiter", "join_aiters", "map_aiter", "map_filter_aiter", "preload_aiter", "push_aiter",
             "sharable_aiter", "stoppable_aiter"]
    monkeypatch.setitem(sys.modules, "aiter", _module("aiter", __version__="0.13.20191203", __all__=names,
                                                      **{n: object() for n in names}))
