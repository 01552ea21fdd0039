"""kernels/flash_attention_fa2.py in Triton's interpreter (blocks of 32 there), against torch in float64: lengths off
and on the block multiples (the EVEN_M/EVEN_N paths), causal both alignments with the band at every offset, rows
that see no key, GQA, padded head dims, forward and gradients."""

from __future__ import annotations

import inspect

import pytest
import torch

from xmfu.harness.machine import compat

if compat.triton_interpreter_too_old():  # the kernels cannot even be defined (triton 3.2 and 3.3 on a CPU)
    pytest.skip(compat.triton_interpreter_too_old(), allow_module_level=True)

from xmfu.kernels import flash_attention as fa
from xmfu.kernels import flash_attention_fa2 as fa2


def _reference(q, k, v, causal_offset=None, scale=None):
    """softmax(scale · q kᵀ) v in float64, GQA by repeating kv heads, keys j > i + causal_offset masked; a row that
    sees no key is zero (as the kernels write it)."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal_offset is not None:
        i = torch.arange(q.shape[2])[:, None]
        s = s.masked_fill(torch.arange(k.shape[2])[None, :] > i + causal_offset, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v


def _inputs(heads, kv_heads, seq_q, seq_kv, dim, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, seq_q, dim, generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(1, kv_heads, seq_kv, dim, generator=g).to(dtype).requires_grad_() for _ in range(2))
    return q, k, v, torch.randn(1, heads, seq_q, dim, generator=g).to(dtype)


def _compare(q, k, v, do, offset, tol):
    out = fa2.flash_attention(q, k, v, causal=offset is not None, causal_offset=offset or 0)
    expected = _reference(q, k, v, offset)
    torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)
    grads = torch.autograd.grad(out, (q, k, v), do)
    want = torch.autograd.grad(expected, (q, k, v), do.double())
    for name, got, ref in zip("qkv", grads, want, strict=True):
        torch.testing.assert_close(got.double(), ref.double(), rtol=tol, atol=tol, msg=lambda m, n=name: f"d{n}: {m}")


# (heads, kv_heads, seq_q, seq_kv, head_dim, causal offset or None). The interpreter's blocks are 32 x 32. GQA and
# MQA at odd lengths, both alignments, through the backend: tests/workloads/test_attention_backends.py.
SHAPES = [
    (2, 1, 50, 30, 80, -20),  # bottom-right with seq_q > seq_kv: rows 0..19 see no key; padded head dim
    (2, 2, 64, 96, 32, 0),  # EVEN_M and EVEN_N, top-left: a whole unmasked block before the band
    (2, 2, 64, 96, 32, 32),  # EVEN, bottom-right: the band one block to the right
    (2, 1, 64, 45, 16, 7),  # EVEN_M only, the band off the block grid
    (2, 2, 43, 64, 16, 40),  # EVEN_N only, the band past the last key for most rows
    (2, 2, 96, 64, 16, None),  # EVEN, no mask at all
    (4, 2, 17, 39, 96, None),  # odd, no causal mask: only the sequence tail masked
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "h{}kv{}-q{}-k{}-d{}-off{}".format(*s))
def test_forward_and_gradients_match_the_reference(shape):
    heads, kv_heads, seq_q, seq_kv, dim, offset = shape
    _compare(*_inputs(heads, kv_heads, seq_q, seq_kv, dim, seed=seq_q * seq_kv), offset, tol=2e-5)


def test_bf16_through_the_interpreters_fp32_dots():
    q, k, v, do = _inputs(4, 2, 37, 45, 32, seed=2, dtype=torch.bfloat16)
    _compare(q, k, v, do, 8, tol=5e-2)


def test_the_even_specialisations_follow_the_blocks():
    """FlashAttention-2's Triton heuristics: a length that is a multiple of its block needs no bounds mask."""
    assert fa2.EVEN["EVEN_M"]({"SEQ_Q": 96, "BLOCK_M": 32}) and not fa2.EVEN["EVEN_M"]({"SEQ_Q": 97, "BLOCK_M": 32})
    assert fa2.EVEN["EVEN_N"]({"SEQ_KV": 128, "BLOCK_N": 64}) and not fa2.EVEN["EVEN_N"]({"SEQ_KV": 96, "BLOCK_N": 64})


def test_a_second_backward_starts_dq_from_zero():
    """dQ accumulates atomically into an fp32 buffer: each backward must start from zeros, not add to the last."""
    q, k, v, do = _inputs(2, 1, 40, 40, 16, seed=9)
    out = fa2.flash_attention(q, k, v, causal=True)
    first = torch.autograd.grad(out, q, do, retain_graph=True)[0]
    second = torch.autograd.grad(out, q, do)[0]
    torch.testing.assert_close(second, first)


def _dots(fn) -> int:
    return inspect.getsource(fn.fn if hasattr(fn, "fn") else fn).count("tl.dot(")


def test_the_backward_spends_five_gemms_per_block_pair_where_the_tutorial_structure_spends_seven():
    assert _dots(fa2._bwd_block) == 5
    assert _dots(fa._attn_bwd_dkdv.fn) + _dots(fa._attn_bwd_dq.fn) == 7


def test_shapes_are_refused_as_the_tutorial_kernel_refuses_them():
    q = torch.empty(1, 3, 8, 64, device="meta")
    with pytest.raises(ValueError, match="multiple of 2 kv heads"):
        fa2.flash_attention(q, torch.empty(1, 2, 8, 64, device="meta"), torch.empty(1, 2, 8, 64, device="meta"))
    with pytest.raises(ValueError, match="72 is not supported"):
        fa2.flash_attention(*(torch.empty(1, 1, 8, 72, device="meta") for _ in range(3)))
    big = torch.empty(1, 1, 2**24, 128, device="meta")
    with pytest.raises(ValueError, match="2\\*\\*31"):
        fa2.flash_attention(big, big, big)
