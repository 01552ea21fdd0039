"""What xmfu's Triton attention kernels share (kernels/flash_attention.py, kernels/flash_attention_fa2.py,
kernels/flash_decoding.py): the head dims, the per-vendor autotune configs and their pruning on sm90+, the grid's
bounds, tile loads, one online-softmax step, the backward's delta kernel, the autograd Function and the shape
checks. Layout (B, H, S, D); one program per (block, head, batch): grid axis 1 the head, axis 2 the batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from xmfu.kernels import fit

LOG2E = 1.4426950408889634  # softmax via exp2: e^x = 2^(x * log2 e)
# tl.arange needs a power of two: 80 and 96 run in a 128-wide tile, the columns past the head dim masked (loaded
# as zeros, so every dot product is exact, and never stored). FlashAttention-2 pads the same way, to kernels
# compiled for a multiple of 32 (`head_size <= 192 ? round_multiple(head_size, 32) : 256`, then predicates the
# columns past the real head dim: csrc/flash_attn/flash_api.cpp, mha_fwd, Dao-AILab/flash-attention 00979f57).
HEAD_DIMS = (16, 32, 64, 80, 96, 128, 256)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


Tile = tuple[int, int, int, int]  # (BLOCK_M, BLOCK_N, num_warps, num_stages on NVIDIA | waves_per_eu on AMD)


def vendor_configs(vendor: str, tiles: list[Tile]) -> list[triton.Config]:
    """One vendor's configs from its tiles: "nvidia" (num_stages) or "amd" (waves_per_eu, 16-wide MFMA, one
    stage). `xmfu kernels` compiles both vendors' lists for their targets on one machine, so neither may depend on
    the machine it runs on."""
    if vendor == "amd":
        return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "waves_per_eu": w, "matrix_instr_nonkdim": 16},
                              num_warps=warps, num_stages=1) for m, n, warps, w in tiles]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s) for m, n, w, s in tiles]


def _configs(nvidia: list[Tile], amd: list[Tile]) -> list[triton.Config]:
    """This machine's configs (vendor_configs); one small tile interpreted."""
    if interpreting():
        return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=1)]
    if getattr(torch.version, "hip", None):
        return vendor_configs("amd", amd)
    return vendor_configs("nvidia", nvidia)


# wgmma (sm90) and tcgen05 (sm100) need a dot's M, the rows of its result, to be a multiple of 64 (and 4 or 8 warps,
# which every config has); Triton falls back to mma.sync for any other dot (lib/Analysis/Utility.cpp supportMMA,
# versions 3 and 5: `retShapePerCTA[rank - 2] % 64 == 0`, triton-lang/triton 00a287a7; `xmfu kernels` compiles it).
# The forward's dots have BLOCK_M rows; the backward's BLOCK_N (dK, dV) and BLOCK_M (dQ) rows.
MMA_ROWS = 64
FWD_ROWS = ("BLOCK_M",)
BWD_ROWS = ("BLOCK_M", "BLOCK_N")  # a fused backward (kernels/flash_attention_fa2.py): dK/dV's and dQ's dots
DKDV_ROWS = ("BLOCK_N",)  # kernels/flash_attention.py's dK/dV kernel: Sᵀ, dV, dPᵀ, dK have BLOCK_N rows
DQ_ROWS = ("BLOCK_M",)  # its dQ kernel: S, dP, dQ have BLOCK_M rows


def for_capability(configs: list[triton.Config], major: int, rows: tuple[str, ...]) -> list[triton.Config]:
    """The configs an NVIDIA part of compute capability `major`.x runs: on sm90 and later those whose `rows` (the
    block sizes that are some dot's M) are multiples of MMA_ROWS, so that no dot falls back to mma.sync."""
    if major < 9:
        return configs
    return [c for c in configs if all(c.kwargs[r] % MMA_ROWS == 0 for r in rows)]


def tile_of(c: triton.Config) -> Tile:
    """A config's Tile: (BLOCK_M, BLOCK_N, num_warps, num_stages on NVIDIA | waves_per_eu on AMD)."""
    last = c.kwargs.get("waves_per_eu", c.num_stages)
    return (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, last)


def pruner(rows: tuple[str, ...], fits: dict[str, list[Tile]] | None = None,
           ) -> dict[str, Callable[..., list[triton.Config]]]:
    """triton.autotune's prune_configs_by for the part Triton compiles for (kernels/fit.py current_arch: the GPU's,
    or the target `xmfu kernels` compiles for on a CPU): on NVIDIA sm90+ for_capability; then, where `fits` lists
    tiles for the part's family (fit.family), only those (the others spill or pass the part's shared or tensor
    memory there, as `xmfu kernels` compiles them). The configs as they are where no target is known (the
    interpreter); never none (early_config_prune, runtime/autotuner.py prune_configs)."""

    def prune(configs: list[triton.Config], named_args: dict, **kwargs: object) -> list[triton.Config]:
        arch = fit.current_arch()
        if arch is None:
            return configs
        kept = for_capability(configs, fit.capability(arch) // 10, rows) if arch.startswith("sm") else configs
        listed = fits.get(fit.family(arch)) if fits else None
        if listed:
            kept = [c for c in kept if tile_of(c) in listed]
        return kept or configs

    return {"early_config_prune": prune}


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
def _load(ptrs, rows, bound, d, EVEN: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr):
    """The tile at ptrs, zero at rows from `bound` on (unless EVEN) and past the head dim (where padded); with no
    mask at all when neither applies."""
    if not EVEN:
        x = tl.load(ptrs, mask=_and_dims(rows < bound, d, HEAD_DIM, BLOCK_D), other=0.0)
    elif BLOCK_D != HEAD_DIM:
        x = tl.load(ptrs, mask=d < HEAD_DIM, other=0.0)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _kv_block(k_base, v_base, cols, offs_d, bound, stride_kn, stride_vn, HEAD_DIM: tl.constexpr,
              BLOCK_D: tl.constexpr, UPCAST: tl.constexpr, EVEN: tl.constexpr):
    """The keys at `cols` transposed (BLOCK_D, BLOCK_N) and the values (BLOCK_N, BLOCK_D), zero at a column from
    `bound` on (unless EVEN: every column inside) and past the head dim; in fp32 where UPCAST. The forward and the
    split-KV decode read them alike."""
    k = _load(k_base + cols[None, :] * stride_kn + offs_d[:, None], cols[None, :], bound, offs_d[:, None], EVEN,
              HEAD_DIM, BLOCK_D)
    v = _load(v_base + cols[:, None] * stride_vn + offs_d[None, :], cols[:, None], bound, offs_d[None, :], EVEN,
              HEAD_DIM, BLOCK_D)
    if UPCAST:
        k, v = k.to(tl.float32), v.to(tl.float32)
    return k, v


@triton.jit
def _softmax_step(acc, l_i, m_i, s, v, PRECISION: tl.constexpr, MASKED: tl.constexpr):
    """One key block of the online softmax (FlashAttention-2, Algorithm 1), scores s in log2 units. Only a masked
    block can leave a row with nothing visible yet (m = -inf): it alone pays the guard."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = m_new
    if MASKED:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.exp2(s - m_use[:, None])
    alpha = tl.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
    return acc, l_i, m_new


# CUDA launches at most 65535 programs along grid axes 1 and 2 (2**31 - 1 along axis 0): CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability", maximum y- or z-dimension of a grid, every capability to 12.x.
# The same launch runs on ROCm, which is held to the same bound here.
GRID_YZ_MAX = 65535


def check_grid(batch: int, heads: int) -> None:
    """Refuses, saying why, a batch or head count past GRID_YZ_MAX: the kernels launch (blocks, heads, batch) grids."""
    for name, n in (("batch", batch), ("heads", heads)):
        if n > GRID_YZ_MAX:
            raise ValueError(f"{name} {n} is more than the {GRID_YZ_MAX} programs a GPU grid axis past the first "
                             f"takes (the kernels launch one program per head on axis 1 and per batch on axis 2)")


@triton.jit
def _bh(HEADS):
    """(batch, head, batch x HEADS + head) of this program: grid axis 1 is the head, axis 2 the batch, each within
    CUDA's 65535 (check_grid); batch x heads on one axis would pass it at batch 2048 x 32 heads."""
    h = tl.program_id(1)
    b = tl.program_id(2)
    return b, h, b * HEADS + h


@triton.jit
def _attn_bwd_delta(Out, DO, DELTA, stride_ob, stride_oh, stride_om, stride_db, stride_dh, stride_dm, HEADS, SEQ_Q,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta = rowsum(dO ∘ O) in fp32, (B, H, Sq) contiguous: FlashAttention-2's D_i (Algorithm 2, line 4; its
    Triton kernel's `_bwd_preprocess_do_o_dot`, tutorial 06's `_attn_bwd_preprocess`)."""
    start_m = tl.program_id(0)
    b, h, bh = _bh(HEADS)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    keep = _and_dims(offs_m[:, None] < SEQ_Q, offs_d[None, :], HEAD_DIM, BLOCK_D)
    o = tl.load(Out + _head(b, h, stride_ob, stride_oh) + offs_m[:, None] * stride_om + offs_d[None, :], mask=keep,
                other=0.0)
    do = tl.load(DO + _head(b, h, stride_db, stride_dh) + offs_m[:, None] * stride_dm + offs_d[None, :], mask=keep,
                 other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + bh.to(tl.int64) * SEQ_Q + offs_m, delta, mask=offs_m < SEQ_Q)


def _meta(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict:
    # The interpreter mis-computes tl.dot on bf16 operands; widening to fp32 first is exact for products.
    precision = "ieee" if q.dtype == torch.float32 else None
    return {"HEAD_DIM": q.shape[-1], "BLOCK_D": triton.next_power_of_2(q.shape[-1]), "IS_CAUSAL": causal,
            "UPCAST": interpreting() and q.dtype == torch.bfloat16, "PRECISION": precision}


def bwd_delta(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """rowsum(dO ∘ O) in fp32, (B, H, Sq) contiguous, by _attn_bwd_delta: one read of O and dO, where the same sum in
    torch (`(o.float() * do.float()).sum(-1)`) writes and reads two fp32 copies of both first."""
    batch, heads, seq_q, dim = o.shape
    delta = torch.empty(o.shape[:3], device=o.device, dtype=torch.float32)
    block_d = triton.next_power_of_2(dim)
    pre_block = 128 if block_d <= 128 else 64  # tutorial 06's PRE_BLOCK; fewer rows at head dim 256
    _attn_bwd_delta[(triton.cdiv(seq_q, pre_block), heads, batch)](
        o, do, delta, o.stride(0), o.stride(1), o.stride(2), do.stride(0), do.stride(1), do.stride(2), heads, seq_q,
        HEAD_DIM=dim, BLOCK_D=block_d, BLOCK_M=pre_block)
    return delta


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


def checked_scale(q: torch.Tensor, k: torch.Tensor, scale: float | None) -> float:
    """The softmax scale (1/sqrt(head dim) unless given), once the shapes are ones the kernels take: a head dim in
    HEAD_DIMS shared by q and k, query heads a multiple of kv heads, one head within int32 offsets (see _head), batch
    and heads within the grid (check_grid)."""
    if q.shape[-1] not in HEAD_DIMS or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"head dim {q.shape[-1]} is not supported; allowed: {HEAD_DIMS}")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads is not a multiple of {k.shape[1]} kv heads")
    check_grid(q.shape[0], q.shape[1])
    if max(q.shape[2], k.shape[2]) * q.shape[-1] >= 2**31:
        raise ValueError(f"one head of {max(q.shape[2], k.shape[2])} tokens x {q.shape[-1]} dims reaches 2**31 "
                         "elements, beyond the kernel's int32 offsets within a head")
    return q.shape[-1] ** -0.5 if scale is None else scale
