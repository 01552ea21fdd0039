"""FlashAttention (forward and backward) in Triton: tiled, online softmax, GQA, both causal alignments; the
`triton` attention backend (workloads/attention/triton.py). What it shares with kernels/flash_attention_fa2.py and
kernels/flash_decoding.py is in kernels/flash_attention_common.py.

Layout (B, H, S, D), contiguous. Forward: one program per (query block, head, batch) streams key/value blocks,
keeping a running max and sum (FlashAttention-2, Dao 2023, Algorithm 1) in the log2 domain so the exponent is a
single exp2: first the key blocks every row of the block sees whole, unmasked, then the masked diagonal band
(Triton tutorial 06's two stages). It stores the log-sum-exp per query row for the backward.
Backward (Algorithm 2): delta = rowsum(dO ∘ O) by a Triton kernel, then dK/dV by key block, looping over the query
heads of its GQA group so no atomics are needed, and dQ by query block. Both recompute P from Q, K and the stored
log-sum-exp: 7 GEMMs per (key block, query block) pair, where FlashAttention-2's count (and xmfu's FLOPs, 2.5x the
forward) is 5; kernels/flash_attention_fa2.py spends 5, adding dQ atomically (not deterministic).
Causal masks keep key j for query i when j <= i + CAUSAL_OFFSET: 0 aligns the diagonal top-left (torch
SDPA's is_causal), seq_kv - seq_q aligns it bottom-right (FlashAttention >= 2.1).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from xmfu.kernels.flash_attention_common import (
    DKDV_ROWS,
    DQ_ROWS,
    FWD_ROWS,
    HEAD_DIMS,
    KEY,
    LOG2E,
    Tile,
    _and_dims,
    _bh,
    _configs,
    _head,
    _kv_block,
    _meta,
    _softmax_step,
    attention_function,
    bwd_delta,
    checked_scale,
    pruner,
)

__all__ = ["HEAD_DIMS", "LOG2E", "flash_attention"]

# The tiles per vendor (`xmfu kernels` compiles each). On NVIDIA sm90+ each kernel drops the tiles whose dots have
# fewer than 64 rows (for_capability: BLOCK_M for the forward and dQ, BLOCK_N for dK/dV); (64, 128, 8, 2) keeps the
# 128-key block that (32, 128, 8, 2) gives dK/dV elsewhere.
FWD_TILES: dict[str, list[Tile]] = {
    "nvidia": [(128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 4), (64, 64, 4, 4), (128, 32, 4, 3)],
    "amd": [(128, 64, 4, 2), (128, 128, 8, 2), (128, 32, 4, 2), (64, 64, 4, 3)]}
BWD_TILES: dict[str, list[Tile]] = {
    "nvidia": [(32, 64, 4, 2), (64, 64, 4, 2), (32, 128, 8, 2), (64, 32, 4, 3), (64, 128, 8, 2)],
    "amd": [(32, 64, 4, 1), (64, 64, 4, 1), (32, 128, 8, 1)]}
# The tiles each part keeps (flash_attention_common.pruner), from `xmfu kernels` (Triton 3.9, bf16/fp16, head dim
# 128): the others spill there. Forward: 128 query rows on 4 warps spill everywhere (NVIDIA 472-620 bytes for
# 128x64, 12-108 for 128x32), 128x128 on 8 warps on sm80 (88) and sm100 (8), every AMD tile of 64 rows at
# waves_per_eu 3 (92-116) and of 8 waves (20-160), and 128x64 on gfx942 (28-32). dK/dV: 64 query rows with 128 dK and
# dV columns each spill on sm80 (84) and sm90 (32-64), 32x128 on 8 warps on sm80 (72).
FWD_FITS: dict[str, list[Tile]] = {
    "sm80": [(128, 64, 8, 3), (64, 64, 4, 4)], "sm90": [(128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 4)],
    "sm100": [(128, 64, 8, 3), (64, 64, 4, 4)], "gfx942": [(128, 32, 4, 2)],
    "gfx950": [(128, 64, 4, 2), (128, 32, 4, 2)]}
DKDV_FITS: dict[str, list[Tile]] = {"sm80": [(32, 64, 4, 2), (64, 32, 4, 3)], "sm90": [(32, 64, 4, 2), (32, 128, 8, 2)]}
FWD_CONFIGS = _configs(**FWD_TILES)
BWD_CONFIGS = _configs(**BWD_TILES)


# CAUSAL_OFFSET not specialised (Triton would compile one kernel for 1, one for multiples of 16 and one for other
# values): an inference decode step passes its cache position, and every position must run the same kernel.
@triton.autotune(configs=FWD_CONFIGS, key=KEY, prune_configs_by=pruner(FWD_ROWS, FWD_FITS))
@triton.jit(do_not_specialize=["CAUSAL_OFFSET"])
def _attn_fwd(Q, K, V, Out, LSE, qk_scale,
              stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
              BATCH, HEADS, GROUP, SEQ_Q, SEQ_KV, CAUSAL_OFFSET,  # BATCH: only for the autotune key
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
              PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    b, h, bh = _bh(HEADS)
    hk = h // GROUP  # GQA: the kv head this query head reads
    m0 = start_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
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
    # Off the band, key blocks every row of this block sees whole (the first row's last key is m0 + CAUSAL_OFFSET)
    # inside the sequence: no mask at all. Then the band, masked: up to the block's last visible key; without a
    # causal mask only the sequence's partial last block. Triton's tutorial 06 splits its loop the same way
    # (`_attn_fwd`, "stage 1: off-band", "stage 2: on-band", triton-lang/triton dc6ee3ed); kernels/
    # flash_attention_fa2.py adds EVEN_M/EVEN_N specialisations to it.
    full_hi = SEQ_KV // BLOCK_N * BLOCK_N
    band_hi = SEQ_KV
    if IS_CAUSAL:
        full_hi = tl.minimum(full_hi, tl.maximum(m0 + CAUSAL_OFFSET + 1, 0) // BLOCK_N * BLOCK_N)
        band_hi = tl.minimum(SEQ_KV, m0 + BLOCK_M + CAUSAL_OFFSET)
    for start_n in range(0, full_hi, BLOCK_N):
        k, v = _kv_block(k_base, v_base, start_n + offs_n, offs_d, SEQ_KV, stride_kn, stride_vn, HEAD_DIM, BLOCK_D,
                         UPCAST, True)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, s, v, PRECISION, False)
    for start_n in range(full_hi, band_hi, BLOCK_N):
        cols = start_n + offs_n
        k, v = _kv_block(k_base, v_base, cols, offs_d, SEQ_KV, stride_kn, stride_vn, HEAD_DIM, BLOCK_D, UPCAST,
                         False)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
        keep = cols[None, :] < SEQ_KV
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, tl.where(keep, s, float("-inf")), v, PRECISION, True)
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    tl.store(LSE + bh.to(tl.int64) * SEQ_Q + offs_m, m_i + tl.log2(l_safe), mask=offs_m < SEQ_Q)
    tl.store(Out + q_off, (acc / l_safe[:, None]).to(Out.dtype.element_ty), mask=q_keep)


# The backward: delta (_attn_bwd_delta), then dK/dV by key block and dQ by query block, 7 GEMMs per (key block, query
# block) pair: the dQ kernel recomputes Q Kᵀ and dO Vᵀ (tutorial 06's `_attn_bwd_dq` does too), where
# kernels/flash_attention_fa2.py adds dQ atomically in 5. Deterministic: no atomics.
@triton.autotune(configs=BWD_CONFIGS, key=KEY, prune_configs_by=pruner(DKDV_ROWS, DKDV_FITS))
@triton.jit
def _attn_bwd_dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, sm_scale,
                   stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                   BATCH, HEADS, KV_HEADS, GROUP, SEQ_Q, SEQ_KV, CAUSAL_OFFSET,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                   PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_n = tl.program_id(0)
    b, hk, _ = _bh(KV_HEADS)
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


@triton.autotune(configs=BWD_CONFIGS, key=KEY, prune_configs_by=pruner(DQ_ROWS))
@triton.jit
def _attn_bwd_dq(Q, K, V, DO, LSE, DELTA, DQ, qk_scale, sm_scale,
                 stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                 BATCH, HEADS, GROUP, SEQ_Q, SEQ_KV, CAUSAL_OFFSET,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
                 PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    b, h, bh = _bh(HEADS)
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


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, causal: bool,
             causal_offset: int, scale: float) -> None:
    """Launches the forward on the tensors' own strides (unit stride along D; `o` has q's strides, `lse` is
    (B, H, Sq) contiguous), so a test can hand it views whose offsets cross 2**31 without copying them."""
    batch, heads, seq_q, _ = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]

    def grid(meta: dict) -> tuple[int, int, int]:
        return (triton.cdiv(seq_q, meta["BLOCK_M"]), heads, batch)

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
    _attn_bwd_dkdv[lambda m: (triton.cdiv(seq_kv, m["BLOCK_N"]), kv_heads, batch)](
        q, k, v, do, lse, delta, dk, dv, *common, batch, heads, kv_heads, heads // kv_heads, seq_q, seq_kv,
        causal_offset, **meta)
    _attn_bwd_dq[lambda m: (triton.cdiv(seq_q, m["BLOCK_M"]), heads, batch)](
        q, k, v, do, lse, delta, dq, *common, batch, heads, heads // kv_heads, seq_q, seq_kv, causal_offset, **meta)


def _grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor,
           causal: bool, causal_offset: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    delta = bwd_delta(o, do)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _backward(q, k, v, do, lse, delta, dq, dk, dv, causal, causal_offset, scale)
    return dq, dk, dv


_FlashAttention = attention_function(_forward, _grads)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    causal_offset: int = 0, scale: float | None = None) -> torch.Tensor:
    """softmax(scale · q kᵀ, causal mask j <= i + causal_offset) v, differentiable. q (B, H, Sq, D),
    k and v (B, H_kv, Skv, D) with H a multiple of H_kv."""
    return _FlashAttention.apply(q, k, v, causal, causal_offset, checked_scale(q, k, scale))
