"""The Triton kernels' autotune keys: a config tuned for one precision, layout, batch x heads or GQA group must not
be reused for another. Triton 3.9's Autotuner.run (triton/runtime/autotuner.py) keys its cache on the values of
the `key` arguments plus the dtype of every tensor argument, and only when there is more than one config; so the
kernels get two configs here, and a stub benchmark (the interpreter would time nothing real) picks the first."""

from __future__ import annotations

import pytest
import torch
import triton

from xmfu.harness.machine import compat

if compat.triton_interpreter_too_old():  # the kernels cannot even be defined (triton 3.2 and 3.3 on a CPU)
    pytest.skip(compat.triton_interpreter_too_old(), allow_module_level=True)

from xmfu.kernels import flash_attention as attention
from xmfu.kernels import matmul as gemm


def _two_configs(monkeypatch, autotuner, **extra) -> dict:
    configs = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, **extra}, num_warps=4, num_stages=1),
               triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, **extra}, num_warps=4, num_stages=1)]
    cache: dict = {}
    monkeypatch.setattr(autotuner, "configs", configs)
    monkeypatch.setattr(autotuner, "cache", cache)
    monkeypatch.setattr(autotuner, "_bench", lambda *a, config, **k: [configs.index(config) + 1.0])
    return cache


def test_gemm_tunes_precision_and_layout_separately(monkeypatch):
    cache = _two_configs(monkeypatch, gemm._matmul_kernel, BLOCK_K=16, GROUP_M=1)
    a, b = torch.randn(32, 48), torch.randn(48, 40)
    out = torch.empty(32, 40)
    gemm.matmul(a, b, out, "ieee")
    gemm.matmul(a, b, out, "tf32")  # same shapes and dtypes, another input precision
    assert len(cache) == 2
    gemm.matmul(a.t().contiguous().t(), b, out, "ieee")  # A stored transposed: same values, other strides
    gemm.matmul(a, b.t().contiguous().t(), out, "ieee")
    assert len(cache) == 4
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)
    gemm.matmul(a, b, out, "ieee")  # an earlier case again: tuned once, reused
    assert len(cache) == 4


@pytest.mark.parametrize("kernel", ["fwd", "bwd"])
def test_attention_tunes_batch_heads_and_gqa_group_separately(kernel, monkeypatch):
    caches = [_two_configs(monkeypatch, k) for k in (attention._attn_fwd, attention._attn_bwd_dkdv,
                                                     attention._attn_bwd_dq)]

    def attend(batch, heads, kv_heads):
        q = torch.randn(batch, heads, 32, 16, requires_grad=True)
        k, v = (torch.randn(batch, kv_heads, 32, 16, requires_grad=True) for _ in range(2))
        o = attention.flash_attention(q, k, v)
        if kernel == "bwd":
            o.sum().backward()

    attend(1, 4, 4)
    attend(4, 1, 1)  # batch x heads = 4 in both, but 4x the programs per head
    attend(1, 4, 2)  # same query shape, GQA group 2
    assert len(caches[0]) == 3  # the forward runs in both
    if kernel == "bwd":
        assert len(caches[1]) == 3 and len(caches[2]) == 3


def test_decode_tunes_once_for_every_position_of_a_cache(monkeypatch):
    """The context grows each step: tuning on it would benchmark inside timed decode samples."""
    from xmfu.kernels import flash_decoding

    configs = [triton.Config({"BLOCK_N": n}, num_warps=4, num_stages=1) for n in (16, 32)]
    cache: dict = {}
    monkeypatch.setattr(flash_decoding._decode_split, "configs", configs)
    monkeypatch.setattr(flash_decoding._decode_split, "cache", cache)
    monkeypatch.setattr(flash_decoding._decode_split, "_bench", lambda *a, config, **k: [configs.index(config) + 1.0])
    q, kv = torch.randn(1, 4, 1, 16), torch.randn(1, 2, 40, 16)
    for kv_len in (1, 16, 17, 40):
        flash_decoding.flash_decode(q, kv, kv, kv_len, splits=2)
    assert len(cache) == 1
    flash_decoding.flash_decode(torch.randn(1, 8, 1, 16), kv, kv, 9, splits=2)  # GQA group 4
    assert len(cache) == 2
