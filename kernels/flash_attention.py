"""FlashAttention (forward and backward) in Triton: tiled, online softmax, GQA, both causal alignments.

Layout (B, H, S, D), contiguous. Forward: one program per (query block, batch x head) streams key/value
blocks, keeping a running max and sum (FlashAttention-2, Dao 2023, Algorithm 1) in the log2 domain so the
exponent is a single exp2. It stores the log-sum-exp per query row for the backward.
Backward (Algorithm 2): dK/dV by key block, looping over the query heads of its GQA group so no atomics
are needed; dQ by query block. Both recompute P from Q, K and the stored log-sum-exp.
Causal masks keep key j for query i when j <= i + CAUSAL_OFFSET: 0 aligns the diagonal top-left (torch
SDPA's is_causal), seq_kv - seq_q aligns it bottom-right (FlashAttention >= 2.1).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634  # softmax via exp2: e^x = 2^(x * log2 e)
# tl.arange needs a power of two: 80 and 96 run in a 128-wide tile, the columns past the head dim masked (loaded
# as zeros, so every dot product is exact, and never stored). FlashAttention-2 pads the same way, to kernels
# compiled for a multiple of 32 (`head_size <= 192 ? round_multiple(head_size, 32) : 256`, then predicates the
# columns past the real head dim: csrc/flash_attn/flash_api.cpp, mha_fwd, Dao-AILab/flash-attention 00979f57).
HEAD_DIMS = (16, 32, 64, 80, 96, 128, 256)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _configs(nvidia: list[tuple[int, int, int, int]], amd: list[tuple[int, int, int, int]]) -> list[triton.Config]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages or waves_per_eu) per vendor; one small tile interpreted."""
    if interpreting():
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=1)]
    if getattr(torch.version, "hip", None):
        return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "waves_per_eu": w, "matrix_instr_nonkdim": 16},
                              num_warps=warps, num_stages=1) for m, n, warps, w in amd]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s) for m, n, w, s in nvidia]


FWD_CONFIGS = _configs(nvidia=[(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 4), (64, 64, 4, 4), (128, 32, 4, 3)],
                       amd=[(128, 64, 4, 2), (128, 128, 8, 2), (128, 32, 4, 2), (64, 64, 4, 3)])
BWD_CONFIGS = _configs(nvidia=[(32, 64, 4, 2), (64, 64, 4, 2), (32, 128, 8, 2), (64, 32, 4, 3)],
                       amd=[(32, 64, 4, 1), (64, 64, 4, 1), (32, 128, 8, 1)])
# Everything that changes the best config: the number of programs (batch x heads, from BATCH and HEADS), the GQA
# group (how many query heads the backward's dK/dV program loops over), sequence lengths, head dim, mask and dot
# precision. Triton 3.9's Autotuner adds the dtype of every tensor argument itself (runtime/autotuner.py, run).
KEY = ["BATCH", "HEADS", "GROUP", "SEQ_Q", "SEQ_KV", "HEAD_DIM", "IS_CAUSAL", "PRECISION"]


@triton.jit
def _head(b, h, stride_b, stride_h):
    """Element offset of head h of batch b, in int64. program_id and an int argument below 2**31 are int32 in
    Triton, and int32 products wrap once a tensor holds 2**31 elements (16 x 32 heads x 32k tokens x 128 dims):
    a wrong address, read or written silently. Triton's tutorial 06-fused-attention.py widens the same way
    (`off_z.to(tl.int64) * stride_qz + off_h.to(tl.int64) * stride_qh`, triton-lang/triton 003da478). Offsets
    within one head (rows x stride + column) stay int32: `flash_attention` refuses a head of 2**31 elements."""
    return b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h


@triton.jit
def _and_dims(mask, d, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """mask & (d < HEAD_DIM) where the head is padded to BLOCK_D columns; as is (no compare) where it is not."""
    if BLOCK_D != HEAD_DIM:
        mask = mask & (d < HEAD_DIM)
    return mask


@triton.jit
def _kv_block(k_base, v_base, cols, offs_d, bound, stride_kn, stride_vn, HEAD_DIM: tl.constexpr,
              BLOCK_D: tl.constexpr, UPCAST: tl.constexpr):
    """The keys at `cols` transposed (BLOCK_D, BLOCK_N) and the values (BLOCK_N, BLOCK_D), zero at a column from
    `bound` on and past the head dim; in fp32 where UPCAST. The forward and the split-KV decode read them alike."""
    k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None],
                mask=_and_dims(cols[None, :] < bound, offs_d[:, None], HEAD_DIM, BLOCK_D), other=0.0)
    v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :],
                mask=_and_dims(cols[:, None] < bound, offs_d[None, :], HEAD_DIM, BLOCK_D), other=0.0)
    if UPCAST:
        k, v = k.to(tl.float32), v.to(tl.float32)
    return k, v


# CAUSAL_OFFSET not specialised (Triton would compile one kernel for 1, one for multiples of 16 and one for other
# values): an inference decode step passes its cache position, and every position must run the same kernel.
@triton.autotune(configs=FWD_CONFIGS, key=KEY)
@triton.jit(do_not_specialize=["CAUSAL_OFFSET"])
def _attn_fwd(Q, K, V, Out, LSE, qk_scale,
              stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
              BATCH, HEADS, GROUP, SEQ_Q, SEQ_KV, CAUSAL_OFFSET,  # BATCH: only for the autotune key
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
              PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // HEADS, bh % HEADS
    hk = h // GROUP  # GQA: the kv head this query head reads
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q_off = _head(b, h, stride_qb, stride_qh) + offs_m[:, None] * stride_qm + offs_d[None, :]
    q_keep = _and_dims(offs_m[:, None] < SEQ_Q, offs_d[None, :], HEAD_DIM, BLOCK_D)
    q = tl.load(Q + q_off, mask=q_keep, other=0.0)  # (BLOCK_M, BLOCK_D); Out shares its strides
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + _head(b, hk, stride_kb, stride_kh)
    v_base = V + _head(b, hk, stride_vb, stride_vh)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max, log2 units
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp2
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    hi = SEQ_KV
    if IS_CAUSAL:  # no key beyond this block's last visible one
        hi = tl.minimum(SEQ_KV, (start_m + 1) * BLOCK_M + CAUSAL_OFFSET)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        k, v = _kv_block(k_base, v_base, cols, offs_d, SEQ_KV, stride_kn, stride_vn, HEAD_DIM, BLOCK_D, UPCAST)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        keep = cols[None, :] < SEQ_KV
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet stays at zero
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    tl.store(LSE + bh.to(tl.int64) * SEQ_Q + offs_m, m_i + tl.log2(l_safe), mask=offs_m < SEQ_Q)
    tl.store(Out + q_off, (acc / l_safe[:, None]).to(Out.dtype.element_ty), mask=q_keep)


@triton.autotune(configs=BWD_CONFIGS, key=KEY)
@triton.jit
def _attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, sm_scale,
                   stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                   BATCH, HEADS, KV_HEADS, GROUP, SEQ_Q, SEQ_KV, CAUSAL_OFFSET,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                   PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_n = tl.program_id(0)
    bhk = tl.program_id(1)
    b, hk = bhk // KV_HEADS, bhk % KV_HEADS
    offs_n = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    kv_off = _head(b, hk, stride_kb, stride_kh) + offs_n[:, None] * stride_kn + offs_d[None, :]  # V, dK, dV too
    kv_keep = _and_dims(offs_n[:, None] < SEQ_KV, offs_d[None, :], HEAD_DIM, BLOCK_D)
    k = tl.load(K + kv_off, mask=kv_keep, other=0.0)  # (BLOCK_N, BLOCK_D)
    v = tl.load(V + kv_off, mask=kv_keep, other=0.0)
    if UPCAST:
        k, v = k.to(tl.float32), v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    lo = 0
    if IS_CAUSAL:  # queries before this one cannot see any key of the block
        lo = tl.maximum(0, start_n * BLOCK_N - CAUSAL_OFFSET) // BLOCK_M * BLOCK_M
    for g in range(0, GROUP):
        bh = (b * HEADS + hk * GROUP + g).to(tl.int64)
        q_head = _head(b, hk * GROUP + g, stride_qb, stride_qh)
        for start_m in range(lo, SEQ_Q, BLOCK_M):
            offs_m = start_m + offs_m0
            q_off = q_head + offs_m[:, None] * stride_qm + offs_d[None, :]
            q_keep = _and_dims(offs_m[:, None] < SEQ_Q, offs_d[None, :], HEAD_DIM, BLOCK_D)
            q = tl.load(Q + q_off, mask=q_keep, other=0.0)  # (BLOCK_M, BLOCK_D); dO shares its strides
            do = tl.load(DO + q_off, mask=q_keep, other=0.0)
            if UPCAST:
                q, do = q.to(tl.float32), do.to(tl.float32)
            lse = tl.load(LSE + bh * SEQ_Q + offs_m, mask=offs_m < SEQ_Q, other=0.0)
            delta = tl.load(DELTA + bh * SEQ_Q + offs_m, mask=offs_m < SEQ_Q, other=0.0)
            s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale  # (BLOCK_N, BLOCK_M)
            keep = (offs_m[None, :] < SEQ_Q) & (offs_n[:, None] < SEQ_KV)
            if IS_CAUSAL:
                keep = keep & (offs_n[:, None] <= offs_m[None, :] + CAUSAL_OFFSET)
            p_t = tl.where(keep, tl.exp2(s_t - lse[None, :]), 0.0)
            dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)
            dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            ds_t = p_t * (dp_t - delta[None, :])
            dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)
    tl.store(DK + kv_off, (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_keep)
    tl.store(DV + kv_off, dv.to(DV.dtype.element_ty), mask=kv_keep)


@triton.autotune(configs=BWD_CONFIGS, key=KEY)
@triton.jit
def _attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ, qk_scale, sm_scale,
                 stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                 BATCH, HEADS, GROUP, SEQ_Q, SEQ_KV, CAUSAL_OFFSET,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                 PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // HEADS, bh % HEADS
    hk = h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q_off = _head(b, h, stride_qb, stride_qh) + offs_m[:, None] * stride_qm + offs_d[None, :]  # dO, dQ too
    q_keep = _and_dims(offs_m[:, None] < SEQ_Q, offs_d[None, :], HEAD_DIM, BLOCK_D)
    q = tl.load(Q + q_off, mask=q_keep, other=0.0)  # (BLOCK_M, BLOCK_D)
    do = tl.load(DO + q_off, mask=q_keep, other=0.0)
    if UPCAST:
        q, do = q.to(tl.float32), do.to(tl.float32)
    row = bh.to(tl.int64) * SEQ_Q + offs_m
    lse = tl.load(LSE + row, mask=offs_m < SEQ_Q, other=0.0)
    delta = tl.load(DELTA + row, mask=offs_m < SEQ_Q, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    kv_base = _head(b, hk, stride_kb, stride_kh)
    hi = SEQ_KV
    if IS_CAUSAL:
        hi = tl.minimum(SEQ_KV, (start_m + 1) * BLOCK_M + CAUSAL_OFFSET)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_off = kv_base + cols[:, None] * stride_kn + offs_d[None, :]
        kv_keep = _and_dims(cols[:, None] < SEQ_KV, offs_d[None, :], HEAD_DIM, BLOCK_D)
        k = tl.load(K + kv_off, mask=kv_keep, other=0.0)  # (BLOCK_N, BLOCK_D)
        v = tl.load(V + kv_off, mask=kv_keep, other=0.0)
        if UPCAST:
            k, v = k.to(tl.float32), v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        keep = (cols[None, :] < SEQ_KV) & (offs_m[:, None] < SEQ_Q)
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)
        p = tl.where(keep, tl.exp2(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    tl.store(DQ + q_off, (dq * sm_scale).to(DQ.dtype.element_ty), mask=q_keep)


def _meta(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict:
    # The interpreter mis-computes tl.dot on bf16 operands; widening to fp32 first is exact for products.
    precision = "ieee" if q.dtype == torch.float32 else None
    return {"HEAD_DIM": q.shape[-1], "BLOCK_D": triton.next_power_of_2(q.shape[-1]), "IS_CAUSAL": causal,
            "UPCAST": interpreting() and q.dtype == torch.bfloat16, "PRECISION": precision}


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, causal: bool,
             causal_offset: int, scale: float) -> None:
    """Launches the forward on the tensors' own strides (unit stride along D; `o` has q's strides, `lse` is
    (B, H, Sq) contiguous), so a test can hand it views whose offsets cross 2**31 without copying them."""
    batch, heads, seq_q, _ = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]

    def grid(meta: dict) -> tuple[int, int]:
        return (triton.cdiv(seq_q, meta["BLOCK_M"]), batch * heads)

    _attn_fwd[grid](q, k, v, o, lse, scale * LOG2E, q.stride(0), q.stride(1), q.stride(2), k.stride(0),
                    k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), batch, heads,
                    heads // kv_heads, seq_q, seq_kv, causal_offset, **_meta(q, k, causal))


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor, lse: torch.Tensor,
              delta: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, causal: bool,
              causal_offset: int, scale: float) -> None:
    """Launches both backward kernels: dO and dQ have q's strides; V, dK and dV have k's."""
    batch, heads, seq_q, _ = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    meta = _meta(q, k, causal)
    common = (scale * LOG2E, scale, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2))
    _attn_bwd_dkdv[lambda m: (triton.cdiv(seq_kv, m["BLOCK_N"]), batch * kv_heads)](
        q, k, v, do, lse, delta, dk, dv, *common, batch, heads, kv_heads, heads // kv_heads, seq_q, seq_kv,
        causal_offset, **meta)
    _attn_bwd_dq[lambda m: (triton.cdiv(seq_q, m["BLOCK_M"]), batch * heads)](
        q, k, v, do, lse, delta, dq, *common, batch, heads, heads // kv_heads, seq_q, seq_kv, causal_offset, **meta)


def attention_function(forward: Callable[..., None],
                       grads: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> type:
    """The autograd Function this module's kernels and kernels/flash_attention_fa2.py's share: contiguous operands;
    `forward(q, k, v, o, lse, causal, causal_offset, scale)` writes the output and its fp32 log-sum-exp, both saved
    for the backward; `grads(q, k, v, o, do, lse, causal, causal_offset, scale)` gives dq, dk, dv in the inputs'
    dtypes."""

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal: bool, causal_offset: int, scale: float):
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            o = torch.empty_like(q)
            lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
            forward(q, k, v, o, lse, causal, causal_offset, scale)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.causal_offset, ctx.scale = causal, causal_offset, scale
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = grads(q, k, v, o, do.contiguous(), lse, ctx.causal, ctx.causal_offset, ctx.scale)
            return dq, dk, dv, None, None, None

    return Attention


def _grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor,
           causal: bool, causal_offset: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    delta = (o.float() * do.float()).sum(-1)  # (B, H, Sq): rowsum(dO ∘ O)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _backward(q, k, v, do, lse, delta, dq, dk, dv, causal, causal_offset, scale)
    return dq, dk, dv


_FlashAttention = attention_function(_forward, _grads)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    causal_offset: int = 0, scale: float | None = None) -> torch.Tensor:
    """softmax(scale · q kᵀ, causal mask j <= i + causal_offset) v, differentiable. q (B, H, Sq, D),
    k and v (B, H_kv, Skv, D) with H a multiple of H_kv."""
    return _FlashAttention.apply(q, k, v, causal, causal_offset, checked_scale(q, k, scale))


def checked_scale(q: torch.Tensor, k: torch.Tensor, scale: float | None) -> float:
    """The softmax scale (1/sqrt(head dim) unless given), once the shapes are ones the kernels take: a head dim in
    HEAD_DIMS shared by q and k, query heads a multiple of kv heads, one head within int32 offsets (see _head)."""
    if q.shape[-1] not in HEAD_DIMS or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"head dim {q.shape[-1]} is not supported; allowed: {HEAD_DIMS}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads is not a multiple of {k.shape[1]} kv heads")
    if max(q.shape[2], k.shape[2]) * q.shape[-1] >= 2**31:
        raise ValueError(f"one head of {max(q.shape[2], k.shape[2])} tokens x {q.shape[-1]} dims reaches 2**31 "
                         "elements, beyond the kernel's int32 offsets within a head")
    return q.shape[-1] ** -0.5 if scale is None else scale
