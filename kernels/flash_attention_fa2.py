"""FlashAttention-2 at the published structure, in Triton: the forward split into unmasked and masked key blocks,
EVEN_M/EVEN_N specialisations, the delta preprocessing in Triton and a 5-GEMM backward with an atomic dQ.

kernels/flash_attention.py (the `triton` backend) keeps its deterministic 7-GEMM backward, so a GPU run measures the
two side by side; what the two share is kernels/flash_attention_common.py. Both
take (B, H, S, D) contiguous, GQA (query head h reads kv head h // group) and both causal alignments: key j is kept
for query i when j <= i + CAUSAL_OFFSET (0: top-left, torch SDPA's is_causal; seq_kv - seq_q: bottom-right,
FlashAttention >= 2.1).

Forward: Triton's tutorial 06-fused-attention.py (triton-lang/triton dc6ee3ed, `_attn_fwd`: "stage 1: off-band",
`STAGE & 1`, then "stage 2: on-band", `STAGE & 2`, only the second computing `mask = offs_m[:, None] >= (start_n +
offs_n[None, :])`; its later revision 003da478 keeps the two stages in `_attn_fwd_tma`). Here the band's bounds follow
CAUSAL_OFFSET and any block size, and the sequence tail is masked too. EVEN_M / EVEN_N drop the bounds masks when
the lengths are multiples of the blocks, as FlashAttention-2's Triton kernel specialises them
(Dao-AILab/flash-attention 00583fb1, flash_attn/flash_attn_triton.py: `"EVEN_M": lambda args: args["seqlen_q"] %
args["BLOCK_M"] == 0`).

Backward: FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning", Algorithm 2): delta = rowsum(dO ∘ O) by a preprocessing kernel (flash_attn_triton.py
`_bwd_preprocess_do_o_dot`; the tutorial's `_attn_bwd_preprocess`), then one program per key block and kv head
keeps K and V on chip and streams the query blocks of every query head of its GQA group, accumulating dK and dV and
adding each block pair's dQ share into an fp32 buffer with atomics (flash_attn_triton.py's SEQUENCE_PARALLEL path,
`tl.atomic_add(dq_ptrs, dq)`; FlashAttention-2's CUDA kernel adds into its dQaccum likewise). That is 5 GEMMs per
(key block, query block) pair; see `_bwd_block`. Tutorial 06's fused `_attn_bwd` is not 5: its dQ half recomputes
Q Kᵀ and dO Vᵀ (`qk = tl.dot(q, kT)`, `dp = tl.dot(do, vT)` in `_attn_bwd_dq`), 7 GEMMs per pair like
kernels/flash_attention.py's two kernels; the atomic dQ trades those two GEMMs for fp32 atomics, and the order of
the atomic adds makes dQ's last bits vary from run to run (FlashAttention-2's `deterministic=False`, its default).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from xmfu.kernels.flash_attention_common import (
    BWD_ROWS,
    FWD_ROWS,
    KEY,
    LOG2E,
    Tile,
    _and_dims,
    _bh,
    _configs,
    _head,
    _load,
    _meta,
    _softmax_step,
    attention_function,
    bwd_delta,
    checked_scale,
    pruner,
)

# (BLOCK_M, BLOCK_N, num_warps, num_stages or waves_per_eu): NOT tuned on a GPU. The forward's are tutorial 06's
# ranges (BLOCK_M 64/128, BLOCK_N 32/64, 4 or 8 warps, 3-4 stages; one stage on AMD); the backward's keep the key
# block large and step the query blocks small, as tutorial 06's dK/dV loop does (BLOCK_N1 128, BLOCK_M1 32).
FWD_TILES: dict[str, list[Tile]] = {
    "nvidia": [(128, 64, 8, 3), (128, 64, 4, 4), (64, 64, 4, 4), (128, 32, 4, 3), (64, 32, 4, 3)],
    "amd": [(128, 64, 4, 2), (128, 32, 4, 2), (64, 64, 4, 3)]}
BWD_TILES: dict[str, list[Tile]] = {
    "nvidia": [(32, 128, 4, 3), (64, 128, 8, 2), (64, 64, 4, 3), (32, 64, 4, 2), (32, 64, 8, 2), (16, 64, 4, 2),
               (64, 64, 8, 3)],
    "amd": [(32, 128, 4, 1), (64, 64, 4, 1), (64, 128, 8, 1), (32, 64, 4, 1), (32, 64, 8, 1)]}
# The tiles each part keeps (flash_attention_common.pruner), from `xmfu kernels` (Triton 3.9, bf16/fp16, head dim
# 128); the others spill there or pass its tensor memory. Forward: 128 query rows on 4 warps spill on NVIDIA (12-628
# bytes), 64 rows at waves_per_eu 3 on AMD (108-144), 128x64 on gfx942 (44). The fused backward holds dK and dV
# (BLOCK_N x 128 fp32 each) and a dQ tile at once: tutorial 06's 32x128 and 64x128 and the 4-warp 64x64 spill on
# sm80 (580-22816 bytes), sm90 (156-2232) and gfx942 (64-916), and fit there as 32x64 on 8 warps (sm80), 64x64 on 8
# warps at 3 stages (sm90: 253 registers, 161 KiB; at 2 stages 8 bytes spill), 32x64 (gfx942: 254-327 VGPRs); on
# sm100 64x128 on 8 warps needs more than the SM's 512 tensor-memory columns and the 32-row tiles fall back to
# mma.sync.
NVIDIA_FWD: list[Tile] = [(128, 64, 8, 3), (64, 64, 4, 4), (64, 32, 4, 3)]
FWD_FITS: dict[str, list[Tile]] = {"sm80": NVIDIA_FWD, "sm90": NVIDIA_FWD, "sm100": NVIDIA_FWD,
                                   "gfx942": [(128, 32, 4, 2)], "gfx950": [(128, 64, 4, 2), (128, 32, 4, 2)]}
BWD_FITS: dict[str, list[Tile]] = {"sm80": [(32, 64, 8, 2), (16, 64, 4, 2)], "sm90": [(64, 64, 8, 3)],
                                   "sm100": [(64, 64, 4, 3)], "gfx942": [(32, 64, 4, 1), (32, 64, 8, 1)],
                                   "gfx950": [(32, 128, 4, 1), (64, 64, 4, 1)]}
FWD_CONFIGS = _configs(**FWD_TILES)
BWD_CONFIGS = _configs(**BWD_TILES)
EVEN = {"EVEN_M": lambda a: a["SEQ_Q"] % a["BLOCK_M"] == 0, "EVEN_N": lambda a: a["SEQ_KV"] % a["BLOCK_N"] == 0}


@triton.jit
def _store(ptrs, x, rows, bound, d, EVEN: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    if not EVEN:
        tl.store(ptrs, x, mask=_and_dims(rows < bound, d, HEAD_DIM, BLOCK_D))
    elif BLOCK_D != HEAD_DIM:
        tl.store(ptrs, x, mask=d < HEAD_DIM)
    else:
        tl.store(ptrs, x)


@triton.jit
def _kv(k_base, v_base, cols, offs_d, SEQ_KV, stride_kn, stride_vn, EVEN: tl.constexpr, HEAD_DIM: tl.constexpr,
        BLOCK_D: tl.constexpr, UPCAST: tl.constexpr):
    """Keys transposed (BLOCK_D, BLOCK_N) and values (BLOCK_N, BLOCK_D) at `cols`."""
    k = _load(k_base + cols[None, :] * stride_kn + offs_d[:, None], cols[None, :], SEQ_KV, offs_d[:, None], EVEN,
              HEAD_DIM, BLOCK_D)
    v = _load(v_base + cols[:, None] * stride_vn + offs_d[None, :], cols[:, None], SEQ_KV, offs_d[None, :], EVEN,
              HEAD_DIM, BLOCK_D)
    if UPCAST:
        k, v = k.to(tl.float32), v.to(tl.float32)
    return k, v


@triton.autotune(configs=FWD_CONFIGS, key=KEY, prune_configs_by=pruner(FWD_ROWS, FWD_FITS))
@triton.heuristics(EVEN)
@triton.jit(do_not_specialize=["CAUSAL_OFFSET"])  # every decode position runs one kernel (flash_attention.py)
def _attn_fwd(Q, K, V, Out, LSE, qk_scale,
              stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
              BATCH, HEADS, GROUP, SEQ_Q, SEQ_KV, CAUSAL_OFFSET,  # BATCH: only for the autotune key
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
              PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr,
              EVEN_N: tl.constexpr):
    start_m = tl.program_id(0)
    b, h, bh = _bh(HEADS)
    m0 = start_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q_off = _head(b, h, stride_qb, stride_qh) + offs_m[:, None] * stride_qm + offs_d[None, :]  # Out's too
    q = _load(Q + q_off, offs_m[:, None], SEQ_Q, offs_d[None, :], EVEN_M, HEAD_DIM, BLOCK_D)  # (BLOCK_M, BLOCK_D)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + _head(b, h // GROUP, stride_kb, stride_kh)
    v_base = V + _head(b, h // GROUP, stride_vb, stride_vh)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max, log2 units
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    # Stage 1, off the band: key blocks below (m0 + CAUSAL_OFFSET + 1), seen whole by every row of this block
    # (the first row's last key is m0 + CAUSAL_OFFSET), and inside the sequence: no mask computed at all.
    # Stage 2, the band: the rest up to the block's last visible key (row m0 + BLOCK_M - 1), masked; without a
    # causal mask it is only the sequence's partial last block, and nothing when EVEN_N.
    full_hi = SEQ_KV if EVEN_N else SEQ_KV // BLOCK_N * BLOCK_N
    band_hi = SEQ_KV
    if IS_CAUSAL:
        full_hi = tl.minimum(full_hi, tl.maximum(m0 + CAUSAL_OFFSET + 1, 0) // BLOCK_N * BLOCK_N)
        band_hi = tl.minimum(SEQ_KV, m0 + BLOCK_M + CAUSAL_OFFSET)
    for start_n in range(0, full_hi, BLOCK_N):
        cols = start_n + offs_n
        k, v = _kv(k_base, v_base, cols, offs_d, SEQ_KV, stride_kn, stride_vn, True, HEAD_DIM, BLOCK_D, UPCAST)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, s, v, PRECISION, False)
    for start_n in range(full_hi, band_hi, BLOCK_N):
        cols = start_n + offs_n
        k, v = _kv(k_base, v_base, cols, offs_d, SEQ_KV, stride_kn, stride_vn, EVEN_N, HEAD_DIM, BLOCK_D, UPCAST)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale
        keep = cols[None, :] < SEQ_KV
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + CAUSAL_OFFSET)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, tl.where(keep, s, float("-inf")), v, PRECISION, True)
    # A row that sees no key (bottom-right, seq_q > seq_kv) outputs zeros and stores lse = +inf, so the backward's
    # exp2(s - lse) is 0 there without a mask.
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    lse = tl.where(empty, float("inf"), m_i + tl.log2(l_safe))
    if EVEN_M:
        tl.store(LSE + bh.to(tl.int64) * SEQ_Q + offs_m, lse)
    else:
        tl.store(LSE + bh.to(tl.int64) * SEQ_Q + offs_m, lse, mask=offs_m < SEQ_Q)
    out = (acc / l_safe[:, None]).to(Out.dtype.element_ty)
    _store(Out + q_off, out, offs_m[:, None], SEQ_Q, offs_d[None, :], EVEN_M, HEAD_DIM, BLOCK_D)


@triton.jit
def _bwd_block(dk, dv, k, v, Q, DO, DQ, LSE, DELTA, q_head, dq_head, row0, start_m, offs_n, offs_d, stride_qm,
               stride_dqm, SEQ_Q, SEQ_KV, CAUSAL_OFFSET, qk_scale, sm_scale, HEAD_DIM: tl.constexpr,
               BLOCK_D: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, BLOCK_M: tl.constexpr,
               EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, CAUSAL: tl.constexpr):
    """One (key block, query block) pair: 5 GEMMs, numbered below; kernels/flash_attention.py spends 7 (its dQ
    kernel recomputes GEMMs 1 and 3)."""
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q_off = q_head + offs_m[:, None] * stride_qm + offs_d[None, :]  # dO shares q's strides
    q = _load(Q + q_off, offs_m[:, None], SEQ_Q, offs_d[None, :], EVEN_M, HEAD_DIM, BLOCK_D)  # (BLOCK_M, BLOCK_D)
    do = _load(DO + q_off, offs_m[:, None], SEQ_Q, offs_d[None, :], EVEN_M, HEAD_DIM, BLOCK_D)
    if UPCAST:
        q, do = q.to(tl.float32), do.to(tl.float32)
    if EVEN_M:
        lse = tl.load(LSE + row0 + offs_m)
        delta = tl.load(DELTA + row0 + offs_m)
    else:  # a row past the sequence: lse +inf makes its P zero
        lse = tl.load(LSE + row0 + offs_m, mask=offs_m < SEQ_Q, other=float("inf"))
        delta = tl.load(DELTA + row0 + offs_m, mask=offs_m < SEQ_Q, other=0.0)
    s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION) * qk_scale  # 1: Sᵀ = K Qᵀ, (BLOCK_N, BLOCK_M)
    p_t = tl.exp2(s_t - lse[None, :])
    if CAUSAL:
        p_t = tl.where(offs_n[:, None] <= offs_m[None, :] + CAUSAL_OFFSET, p_t, 0.0)
    if not EVEN_N:  # a padded key reads as zeros, but exp2(0 - lse) can overflow for a row of very negative scores
        p_t = tl.where(offs_n[:, None] < SEQ_KV, p_t, 0.0)
    dv += tl.dot(p_t.to(do.dtype), do, input_precision=PRECISION)  # 2: dV += Pᵀ dO
    dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)  # 3: dPᵀ = V dOᵀ
    ds_t = p_t * (dp_t - delta[None, :]) * sm_scale  # dS = P ∘ (dP - D), scaled once for dK and dQ
    dk += tl.dot(ds_t.to(q.dtype), q, input_precision=PRECISION)  # 4: dK += dSᵀ Q
    dq = tl.dot(tl.trans(ds_t).to(k.dtype), k, input_precision=PRECISION)  # 5: dQ += dS K, added atomically
    dq_ptrs = DQ + dq_head + offs_m[:, None] * stride_dqm + offs_d[None, :]
    if EVEN_M and BLOCK_D == HEAD_DIM:
        tl.atomic_add(dq_ptrs, dq, sem="relaxed")  # no order needed: dQ is read after the kernel
    else:
        tl.atomic_add(dq_ptrs, dq, mask=_and_dims(offs_m[:, None] < SEQ_Q, offs_d[None, :], HEAD_DIM, BLOCK_D),
                      sem="relaxed")
    return dk, dv


# DQ accumulates with atomic adds, so every config the autotuner times must start from zeros again, and so must the
# chosen one's run after them: Triton 3.9's runtime/autotuner.py zeroes `reset_to_zero` before each timed call and
# once more (`self.pre_hook(full_nargs, reset_only=True)`) after choosing.
@triton.autotune(configs=BWD_CONFIGS, key=KEY, reset_to_zero=["DQ"], prune_configs_by=pruner(BWD_ROWS, BWD_FITS))
@triton.heuristics(EVEN)
@triton.jit(do_not_specialize=["CAUSAL_OFFSET"])
def _attn_bwd(Q, K, V, DO, LSE, DELTA, DQ, DK, DV, qk_scale, sm_scale,
              stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn, stride_dqb, stride_dqh, stride_dqm,
              BATCH, HEADS, KV_HEADS, GROUP, SEQ_Q, SEQ_KV, CAUSAL_OFFSET,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, IS_CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
              PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr,
              EVEN_N: tl.constexpr):
    start_n = tl.program_id(0)
    b, hk, _ = _bh(KV_HEADS)
    n0 = start_n * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    kv_off = _head(b, hk, stride_kb, stride_kh) + offs_n[:, None] * stride_kn + offs_d[None, :]  # V, dK, dV too
    k = _load(K + kv_off, offs_n[:, None], SEQ_KV, offs_d[None, :], EVEN_N, HEAD_DIM, BLOCK_D)  # (BLOCK_N, BLOCK_D)
    v = _load(V + kv_off, offs_n[:, None], SEQ_KV, offs_d[None, :], EVEN_N, HEAD_DIM, BLOCK_D)
    if UPCAST:
        k, v = k.to(tl.float32), v.to(tl.float32)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    # Query blocks from `lo`: the first that sees a key of this block (query i sees key j from i = j - OFFSET on).
    # The band, masked: [lo, full_lo); from full_lo (every row sees the block's last key, n0 + BLOCK_N - 1) no mask.
    lo = 0
    full_lo = 0
    if IS_CAUSAL:
        lo = tl.maximum(0, n0 - CAUSAL_OFFSET) // BLOCK_M * BLOCK_M
        full_lo = tl.cdiv(tl.maximum(0, n0 + BLOCK_N - 1 - CAUSAL_OFFSET), BLOCK_M) * BLOCK_M
    for g in range(0, GROUP):
        h = hk * GROUP + g
        row0 = (b * HEADS + h).to(tl.int64) * SEQ_Q
        q_head = _head(b, h, stride_qb, stride_qh)
        dq_head = _head(b, h, stride_dqb, stride_dqh)
        for start_m in range(lo, tl.minimum(full_lo, SEQ_Q), BLOCK_M):
            dk, dv = _bwd_block(dk, dv, k, v, Q, DO, DQ, LSE, DELTA, q_head, dq_head, row0, start_m, offs_n, offs_d,
                                stride_qm, stride_dqm, SEQ_Q, SEQ_KV, CAUSAL_OFFSET, qk_scale, sm_scale, HEAD_DIM,
                                BLOCK_D, UPCAST, PRECISION, BLOCK_M, EVEN_M, EVEN_N, True)
        for start_m in range(full_lo, SEQ_Q, BLOCK_M):
            dk, dv = _bwd_block(dk, dv, k, v, Q, DO, DQ, LSE, DELTA, q_head, dq_head, row0, start_m, offs_n, offs_d,
                                stride_qm, stride_dqm, SEQ_Q, SEQ_KV, CAUSAL_OFFSET, qk_scale, sm_scale, HEAD_DIM,
                                BLOCK_D, UPCAST, PRECISION, BLOCK_M, EVEN_M, EVEN_N, False)
    _store(DK + kv_off, dk.to(DK.dtype.element_ty), offs_n[:, None], SEQ_KV, offs_d[None, :], EVEN_N, HEAD_DIM,
           BLOCK_D)
    _store(DV + kv_off, dv.to(DV.dtype.element_ty), offs_n[:, None], SEQ_KV, offs_d[None, :], EVEN_N, HEAD_DIM,
           BLOCK_D)


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, causal: bool,
             causal_offset: int, scale: float) -> None:
    """The forward on the tensors' own strides (unit stride along D; `o` has q's strides, `lse` (B, H, Sq)
    contiguous)."""
    batch, heads, seq_q, _ = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    _attn_fwd[lambda m: (triton.cdiv(seq_q, m["BLOCK_M"]), heads, batch)](
        q, k, v, o, lse, scale * LOG2E, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), batch, heads, heads // kv_heads, seq_q, seq_kv, causal_offset,
        **_meta(q, k, causal))


def _backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor,
              lse: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor, causal: bool, causal_offset: int,
              scale: float) -> torch.Tensor:
    """The delta kernel, then the fused backward; returns dQ in fp32 (q's shape). dO has q's strides; V, dK and dV
    have k's."""
    batch, heads, seq_q, _ = q.shape
    kv_heads, seq_kv = k.shape[1], k.shape[2]
    meta = _meta(q, k, causal)
    delta = bwd_delta(o, do)
    dq = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    _attn_bwd[lambda m: (triton.cdiv(seq_kv, m["BLOCK_N"]), kv_heads, batch)](
        q, k, v, do, lse, delta, dq, dk, dv, scale * LOG2E, scale, q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2), dq.stride(0), dq.stride(1), dq.stride(2), batch, heads, kv_heads,
        heads // kv_heads, seq_q, seq_kv, causal_offset, **meta)
    return dq


def _grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor, lse: torch.Tensor,
           causal: bool, causal_offset: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dq = _backward(q, k, v, o, do, lse, dk, dv, causal, causal_offset, scale)
    return dq.to(q.dtype), dk, dv


_FlashAttention2 = attention_function(_forward, _grads)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    causal_offset: int = 0, scale: float | None = None) -> torch.Tensor:
    """softmax(scale · q kᵀ, causal mask j <= i + causal_offset) v, differentiable. q (B, H, Sq, D), k and v
    (B, H_kv, Skv, D) with H a multiple of H_kv: kernels/flash_attention.py's contract."""
    return _FlashAttention2.apply(q, k, v, causal, causal_offset, checked_scale(q, k, scale))
