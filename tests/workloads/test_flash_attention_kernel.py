"""kernels/flash_attention.py in Triton's interpreter, against torch in float64: element offsets past 2**31,
padded head dims and the split-KV decode path."""

from __future__ import annotations

import pytest
import torch

from xmfu.harness.machine import compat

if compat.triton_interpreter_too_old():  # the kernels cannot even be defined (triton 3.2 and 3.3 on a CPU)
    pytest.skip(compat.triton_interpreter_too_old(), allow_module_level=True)

from xmfu.kernels import flash_attention as fa


def _reference(q, k, v, causal_offset=None, scale=None):
    """softmax(scale · q kᵀ) v in float64, GQA by repeating kv heads; keys j > i + causal_offset masked."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal_offset is not None:
        i = torch.arange(q.shape[2])[:, None]
        s = s.masked_fill(torch.arange(k.shape[2])[None, :] > i + causal_offset, float("-inf"))
    return torch.softmax(s, -1) @ v


# Far views: one tensor of 2**32 + a little fp16 elements (8 GiB of address space, of which only the pages the
# kernel touches are ever backed: a few MiB). Each operand is a view whose batch stride is just under 2**31, so
# batch 1's tile straddles element offset 2**31 from the operand's start. Each operand starts at element 2**31 of
# the buffer, so an offset wrapped to int32 (true - 2**32) still lands inside it: wrong data, not a crash.
FAR_STRIDE = 2**31 - 64
SEQ, DIM = 16, 16


@pytest.fixture(scope="module")
def far_memory():
    try:
        return torch.empty(2**32 + 16 * SEQ * DIM, dtype=torch.float16)
    except RuntimeError as exc:  # a host that does not overcommit memory (vm.overcommit_memory=2)
        pytest.skip(f"cannot reserve 8 GiB of address space: {exc}")


def _far(memory, slot: int, values: torch.Tensor | None = None) -> torch.Tensor:
    """A (2, 1, SEQ, DIM) view at the slot-th region past element 2**31, batch 1 at FAR_STRIDE from batch 0."""
    view = memory.as_strided((2, 1, SEQ, DIM), (FAR_STRIDE, SEQ * DIM, DIM, 1), 2**31 + slot * SEQ * DIM)
    view.copy_(torch.zeros(2, 1, SEQ, DIM) if values is None else values)
    return view


def test_offsets_past_two_to_the_31_are_computed_in_int64(far_memory):
    """Before the offsets were widened, batch 1's rows past 2**31 were read and written 2**32 elements lower."""
    g = torch.Generator().manual_seed(3)
    q0, k0, v0, do0 = (torch.randn(2, 1, SEQ, DIM, generator=g).half() for _ in range(4))
    q, k, v, o, do = (_far(far_memory, i, t) for i, t in enumerate((q0, k0, v0, None, do0)))
    dq, dk, dv = (_far(far_memory, 5 + i) for i in range(3))
    assert q.stride(0) < 2**31 <= q.stride(0) + SEQ * DIM - 1  # the last rows of batch 1 lie past 2**31
    lse = torch.empty(2, 1, SEQ)
    fa._forward(q, k, v, o, lse, True, 0, DIM**-0.5)
    leaf = [t.double().requires_grad_() for t in (q0, k0, v0)]
    expected = _reference(*leaf, causal_offset=0)
    torch.testing.assert_close(o.double(), expected, rtol=2e-3, atol=2e-3)
    delta = (o.float() * do.float()).sum(-1)
    fa._backward(q, k, v, do, lse, delta, dq, dk, dv, True, 0, DIM**-0.5)
    expected.backward(do0.double())
    for got, want in zip((dq, dk, dv), leaf, strict=True):
        torch.testing.assert_close(got.double(), want.grad, rtol=5e-3, atol=5e-3)


def test_a_head_of_two_to_the_31_elements_is_refused():
    q = torch.empty(1, 1, 2**24, 128, device="meta")
    with pytest.raises(ValueError, match="2\\*\\*31"):
        fa.flash_attention(q, q, q)


def test_the_backends_list_the_kernels_head_dims():
    from xmfu.workloads.attention import triton as backend

    assert backend.HEAD_DIMS == fa.HEAD_DIMS


@pytest.mark.parametrize("head_dim", [80, 96, 256])
def test_padded_head_dims_forward_and_backward(head_dim):
    """80 and 96 run in a 128-wide tile: the output and gradients equal the reference's."""
    g = torch.Generator().manual_seed(head_dim)
    q = torch.randn(1, 2, 21, head_dim, generator=g, requires_grad=True)
    k, v = (torch.randn(1, 1, 23, head_dim, generator=g, requires_grad=True) for _ in range(2))
    out = fa.flash_attention(q, k, v, causal=True, causal_offset=3)
    expected = _reference(q, k, v, causal_offset=3)
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-4)
    do = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad(out, (q, k, v), do)
    want = torch.autograd.grad(expected, (q, k, v), do.double())
    for got, ref in zip(grads, want, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_padding_columns_are_neither_read_nor_written():
    """Operands as views into rows 16 wider than the head: nan where the padding would read, and the output's
    extra columns must keep their sentinel."""
    g = torch.Generator().manual_seed(1)
    rows = [torch.randn(1, 2, 19, 96, generator=g) for _ in range(4)]
    for t in rows[:3]:
        t[..., 80:] = float("nan")
    rows[3][..., 80:] = 7.0
    q, k, v, o = (t[..., :80] for t in rows)
    fa._forward(q, k, v, o, torch.empty(1, 2, 19), False, 0, 80**-0.5)
    torch.testing.assert_close(o.double(), _reference(q, k, v), rtol=1e-4, atol=1e-4)
    assert bool((rows[3][..., 80:] == 7.0).all())


# (heads, kv_heads, capacity, kv_len, head_dim, splits): GQA groups 1 to 8 packed into one tile, contexts off the
# tile and range multiples, empty trailing ranges, a padded head dim, one range and the CPU default.
DECODE = [(4, 4, 40, 40, 16, 3), (8, 2, 70, 37, 32, 4), (8, 1, 64, 1, 16, 4), (4, 2, 50, 50, 80, 1),
          (6, 3, 33, 20, 64, None)]


@pytest.mark.parametrize("shape", DECODE, ids=lambda s: "h{}kv{}-c{}-len{}-d{}-s{}".format(*s))
def test_split_kv_decode_matches_the_reference(shape):
    from xmfu.kernels.flash_decoding import flash_decode

    heads, kv_heads, capacity, kv_len, dim, splits = shape
    g = torch.Generator().manual_seed(capacity)
    q = torch.randn(2, heads, 1, dim, generator=g)
    k, v = (torch.randn(2, kv_heads, capacity, dim, generator=g) for _ in range(2))
    out = flash_decode(q, k, v, kv_len, splits=splits)
    expected = _reference(q, k[:, :, :kv_len], v[:, :, :kv_len])
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_split_kv_decode_in_bf16_and_as_the_causal_forward_computes_it():
    """A decode token at position p with causal offset p, through both kernels: the same slots 0..p."""
    from xmfu.kernels.flash_decoding import flash_decode

    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 1, 32, generator=g).bfloat16()
    k, v = (torch.randn(1, 2, 48, 32, generator=g).bfloat16() for _ in range(2))
    tiled = fa.flash_attention(q, k, v, causal=True, causal_offset=29)
    torch.testing.assert_close(flash_decode(q, k, v, 30, splits=3).float(), tiled.float(), rtol=2e-2, atol=2e-2)


def test_no_visible_key_gives_zeros_as_the_tiled_kernel_does():
    from xmfu.kernels.flash_decoding import flash_decode

    q, k = torch.ones(1, 2, 1, 16), torch.ones(1, 1, 8, 16)
    assert flash_decode(q, k, k, 0, splits=2).abs().max() == 0


def test_split_count_follows_flash_attention_2():
    """flash_api.cpp's own example: batch x heads 48 on 108 SMs takes 2 splits (efficiency 0.89), not 3 (0.67)."""
    from xmfu.kernels.flash_decoding import num_splits

    assert num_splits(48, 108, key_blocks=64) == 2
    assert num_splits(100, 108, key_blocks=64) == 1  # nearly a full wave already
    assert num_splits(1, 264, key_blocks=8) == 8  # one sequence, one kv head: as many ranges as key blocks
