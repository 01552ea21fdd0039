"""Split-KV decode attention (flash-decoding) in Triton: one query token per sequence against a KV cache.

The tiled forward (flash_attention.py) gives a decode step one program per (batch, query head), whose BLOCK_M
query tile holds a single real row, and each program streams the whole context alone: B x H programs, too few
to fill a GPU at small batch. Here:
- the G query heads of a GQA group share their kv head, so they are packed into the M dimension of one tile
  (FlashAttention-2 does the same for seqlen_q == 1: `seqlenq_ngroups_swapped` reshapes q from
  (b, 1, nheads_kv * ngroups, d) to (b, ngroups, nheads_kv, d); csrc/flash_attn/flash_api.cpp, mha_fwd,
  Dao-AILab/flash-attention 00979f57): each key block is loaded once per group, not once per query head;
- the context is split into SPLITS ranges, one program per (range, kv head, batch), each writing its partial
  output and log-sum-exp; a second kernel combines them per query head (FlashAttention-2's split-KV forward,
  "Flash-Decoding for long-context inference", Dao, Haziza, Massa and Sizov, 2023).
Layout (B, H, 1, D) for q and the output, (B, H_kv, S_kv, D) for the cache; keys 0..kv_len-1 are attended.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from xmfu.kernels import fit
from xmfu.kernels.flash_attention_common import (
    HEAD_DIMS,
    LOG2E,
    _and_dims,
    _bh,
    _head,
    _kv_block,
    check_grid,
    interpreting,
)

# (BLOCK_N, num_warps, num_stages on NVIDIA | waves_per_eu on AMD) per vendor; the M tile is fixed by the GQA group
# (`xmfu kernels` compiles each).
TILES: dict[str, list[tuple[int, int, int]]] = {"nvidia": [(64, 4, 3), (128, 4, 3), (64, 4, 2), (32, 4, 4)],
                                                "amd": [(64, 4, 2), (128, 4, 2), (32, 4, 2)]}
# gfx942 keeps its 64- and 32-key tiles: the 128-key one spills there (12 bytes, `xmfu kernels`, Triton 3.9 bf16).
FITS = {"gfx942": [(64, 4, 2), (32, 4, 2)]}


def _tile(c: triton.Config) -> tuple[int, int, int]:
    return (c.kwargs["BLOCK_N"], c.num_warps, c.kwargs.get("waves_per_eu", c.num_stages))


def vendor_configs(vendor: str, tiles: list[tuple[int, int, int]]) -> list[triton.Config]:
    if vendor == "amd":
        return [triton.Config({"BLOCK_N": n, "waves_per_eu": w}, num_warps=warps, num_stages=1)
                for n, warps, w in tiles]
    return [triton.Config({"BLOCK_N": n}, num_warps=w, num_stages=s) for n, w, s in tiles]


def _configs() -> list[triton.Config]:
    """This machine's configs; one small tile interpreted."""
    if interpreting():
        return [triton.Config({"BLOCK_N": 16}, num_warps=4, num_stages=1)]
    vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
    return vendor_configs(vendor, TILES[vendor])


# What a decode run keeps fixed from step to step: the cache's capacity and the split count are, the context
# length (KV_LEN) and range length (SPLIT_LEN) are not, so that no step re-tunes inside a timed sample.
KEY = ["BATCH", "KV_HEADS", "GROUP", "SEQ_KV", "SPLITS", "HEAD_DIM", "PRECISION"]


@triton.autotune(configs=_configs(), key=KEY, prune_configs_by={"early_config_prune": fit.listed(FITS, _tile)})
@triton.jit(do_not_specialize=["KV_LEN", "SPLIT_LEN"])  # one kernel for every position (see flash_attention.py)
def _decode_split(Q, K, V, O_PART, LSE_PART, qk_scale,
                  stride_qb, stride_qh, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                  BATCH, KV_HEADS, GROUP, SEQ_KV, KV_LEN, SPLIT_LEN, SPLITS,  # BATCH, SEQ_KV: the key only
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                  BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    split = tl.program_id(0)
    b, hk, bhk = _bh(KV_HEADS)
    offs_g = tl.arange(0, BLOCK_G)  # the group's query heads hk * GROUP + g, as rows of the tile
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    q_keep = _and_dims(offs_g[:, None] < GROUP, offs_d[None, :], HEAD_DIM, BLOCK_D)
    q_off = _head(b, hk * GROUP, stride_qb, stride_qh) + offs_g[:, None] * stride_qh + offs_d[None, :]
    q = tl.load(Q + q_off, mask=q_keep, other=0.0)  # (BLOCK_G, BLOCK_D)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + _head(b, hk, stride_kb, stride_kh)
    v_base = V + _head(b, hk, stride_vb, stride_vh)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    lo = split * SPLIT_LEN
    hi = tl.minimum(lo + SPLIT_LEN, KV_LEN)  # a range past the context is empty: lse -inf, output 0
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        k, v = _kv_block(k_base, v_base, cols, offs_d, hi, stride_kn, stride_vn, HEAD_DIM, BLOCK_D, UPCAST, False)
        s = tl.dot(q, k, input_precision=PRECISION) * qk_scale  # (BLOCK_G, BLOCK_N), log2 units
        s = tl.where(cols[None, :] < hi, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
        m_i = m_new
    l_safe = tl.where(l_i == 0.0, 1.0, l_i)
    rows = (bhk * SPLITS + split).to(tl.int64) * GROUP + offs_g  # partials (B, H_kv, SPLITS, GROUP[, BLOCK_D])
    tl.store(LSE_PART + rows, m_i + tl.log2(l_safe), mask=offs_g < GROUP)
    tl.store(O_PART + rows[:, None] * BLOCK_D + offs_d[None, :], acc / l_safe[:, None],
             mask=offs_g[:, None] < GROUP)


@triton.jit
def _decode_combine(O_PART, LSE_PART, Out, stride_ob, stride_oh, HEADS, GROUP, SPLITS,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    """One program per (batch, query head): out = Σ_s 2^(lse_s - m) o_s / Σ_s 2^(lse_s - m), m = max_s lse_s."""
    bh = tl.program_id(0)
    b, h = bh // HEADS, bh % HEADS
    hk, g = h // GROUP, h % GROUP
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    rows = ((b * (HEADS // GROUP) + hk).to(tl.int64) * SPLITS + offs_s) * GROUP + g  # (BLOCK_S,)
    lse = tl.load(LSE_PART + rows, mask=offs_s < SPLITS, other=float("-inf"))
    m = tl.max(lse, 0)
    w = tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m))  # no visible key anywhere: every weight 0
    total = tl.sum(w, 0)
    o = tl.load(O_PART + rows[:, None] * BLOCK_D + offs_d[None, :], mask=offs_s[:, None] < SPLITS, other=0.0)
    out = tl.sum(o * w[:, None], 0) / tl.where(total == 0.0, 1.0, total)  # (BLOCK_D,)
    tl.store(Out + _head(b, h, stride_ob, stride_oh) + offs_d, out.to(Out.dtype.element_ty), mask=offs_d < HEAD_DIM)


def num_splits(programs: int, processors: int, key_blocks: int, max_splits: int = 128) -> int:
    """FlashAttention-2's num_splits_heuristic (csrc/flash_attn/flash_api.cpp, 00979f57): 1 when `programs` nearly
    fill the `processors` (>= 80%); otherwise the fewest splits whose wave efficiency (programs x splits /
    processors over its ceiling) reaches 85% of the best, counting only splits that change the blocks per split."""
    if programs >= 0.8 * processors:
        return 1
    max_splits = min(max_splits, processors, key_blocks)
    eligible = [s for s in range(1, max_splits + 1)
                if s == 1 or math.ceil(key_blocks / s) != math.ceil(key_blocks / (s - 1))]
    if not eligible:
        return 1

    def efficiency(s: int) -> float:
        waves = programs * s / processors
        return waves / math.ceil(waves)

    best = max(efficiency(s) for s in eligible)
    return next(s for s in eligible if efficiency(s) >= 0.85 * best)


def _splits_for(k: torch.Tensor) -> int:
    """Splits for a cache (B, H_kv, C, D). FlashAttention-2 passes 2 x SMs (128-thread blocks: two per SM) and
    64-key blocks; torch's multi_processor_count is the SM count on CUDA and the CU count on ROCm. The interpreter
    has no processors to fill: 4 ranges, so the combine is exercised on a CPU."""
    key_blocks = triton.cdiv(k.shape[2], 64)
    if k.device.type == "cpu":
        return max(1, min(4, key_blocks))
    # CUDA/ROCm-specific on purpose: multi_processor_count is a torch.cuda device property (torch 2.13
    # _CudaDeviceProperties); torch.xpu's properties have no such field, and no other accelerator runs this kernel
    sms = torch.cuda.get_device_properties(k.device).multi_processor_count
    return num_splits(k.shape[0] * k.shape[1], 2 * sms, key_blocks)


def flash_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_len: int, scale: float | None = None,
                 splits: int | None = None) -> torch.Tensor:
    """softmax(scale · q kᵀ) v over keys 0..kv_len-1 of the cache, forward only. q (B, H, 1, D); k and v
    (B, H_kv, C, D) with unit stride along D (a static cache is passed as is), H a multiple of H_kv."""
    batch, heads, seq_q, dim = q.shape
    kv_heads, capacity = k.shape[1], k.shape[2]
    if seq_q != 1 or dim not in HEAD_DIMS or k.shape[-1] != dim or heads % kv_heads:
        raise ValueError(f"flash_decode takes one query token of head dim in {HEAD_DIMS} and H a multiple of H_kv; "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}")
    check_grid(batch, heads)  # the split kernel's grid is (splits, kv heads, batch); the combine's batch x heads
    if k.stride(-1) != 1 or v.stride(-1) != 1 or v.stride() != k.stride():
        raise ValueError("the cache's K and V need the same strides, unit along D")
    q = q.contiguous()
    group, block_d = heads // kv_heads, triton.next_power_of_2(dim)
    splits = splits or _splits_for(k)
    kv_len = max(0, min(kv_len, capacity))
    split_len = triton.cdiv(triton.cdiv(kv_len, splits), 16) * 16  # 16-aligned ranges; the last may be short
    o_part = torch.empty((batch, kv_heads, splits, group, block_d), device=q.device, dtype=torch.float32)
    lse_part = torch.empty((batch, kv_heads, splits, group), device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    scale = dim ** -0.5 if scale is None else scale
    _decode_split[(splits, kv_heads, batch)](
        q, k, v, o_part, lse_part, scale * LOG2E, q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), batch, kv_heads, group, capacity, kv_len, split_len, splits,
        HEAD_DIM=dim, BLOCK_D=block_d, UPCAST=interpreting() and q.dtype == torch.bfloat16,
        PRECISION="ieee" if q.dtype == torch.float32 else None, BLOCK_G=max(16, triton.next_power_of_2(group)))
    _decode_combine[(batch * heads,)](o_part, lse_part, out, out.stride(0), out.stride(1), heads, group, splits,
                                      HEAD_DIM=dim, BLOCK_D=block_d, BLOCK_S=triton.next_power_of_2(splits))
    return out
