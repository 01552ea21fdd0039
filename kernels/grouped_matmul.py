"""A persistent grouped GEMM in Triton: C[rows of group g] = A[rows of group g] @ B[g], every group in one launch.

The layout of a mixture of experts' expert GEMM: A (M, K) holds the rows of all groups one after another (tokens
sorted by expert), `offsets` (G + 1,) int32 on the device says where each group's rows start and end (a group may
have none), B (G, K, N) holds one matrix per group, and C (M, N) follows A's rows.

The structure follows Triton's grouped GEMM tutorial (python/tutorials/08-grouped-gemm.py): a fixed number of
programs (about one per SM) walks the tiles of all groups in turn, program p taking tiles p, p + P, p + 2P...;
a group's tiles are its row tiles x column tiles. Unlike the tutorial, the group sizes are read on the device (no
host copy of the routing), and the groups share one A, one B and one C instead of pointer arrays. Row tails are
masked (a group's rows end where the next group's begin), as are the K and N tails.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# One tile configuration per target; small enough for the interpreter, which runs each program in numpy.
CONFIGS = {"interpreter": (32, 32, 32, 4), "gpu": (128, 128, 64, 8)}  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _grouped_matmul_kernel(
    a_ptr, b_ptr, c_ptr, offsets_ptr, G, N, K,
    stride_am, stride_ak, stride_bg, stride_bk, stride_bn, stride_cm, stride_cn,
    NUM_PROGRAMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    tile = tl.program_id(axis=0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    first = 0  # the first tile index of group g
    for g in range(G):
        start = tl.load(offsets_ptr + g)
        end = tl.load(offsets_ptr + g + 1)
        tiles = tl.cdiv(end - start, BLOCK_M) * tiles_n
        while tile >= first and tile < first + tiles:  # this program's tiles in group g
            local = tile - first
            offs_m = start + (local // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) rows of A and C
            offs_n = (local % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
            offs_k = tl.arange(0, BLOCK_K)
            b_group = b_ptr + tl.cast(stride_bg, tl.int64) * g
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k in range(0, tl.cdiv(K, BLOCK_K)):
                ks = k * BLOCK_K + offs_k
                a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :] * stride_ak,
                            mask=(offs_m[:, None] < end) & (ks[None, :] < K), other=0.0)  # (BLOCK_M, BLOCK_K)
                b = tl.load(b_group + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                            mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)  # (BLOCK_K, BLOCK_N)
                if UPCAST:  # the interpreter mis-computes tl.dot on bf16 (kernels/matmul.py); the products are exact
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
            c = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
            tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < end) & (offs_n[None, :] < N))
            tile += NUM_PROGRAMS
        first += tiles


def programs(device: torch.device) -> int:
    """Persistent programs: one per SM (CU on AMD) of the device; 4 in the interpreter."""
    if interpreting() or device.type == "cpu":
        return 4
    return torch.cuda.get_device_properties(device).multi_processor_count


def grouped_matmul(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor, out: torch.Tensor,
                   input_precision: str | None = None) -> torch.Tensor:
    """out = per group g: a[offsets[g]:offsets[g+1]] @ b[g]. a (M, K), b (G, K, N), offsets (G + 1,) int32 with
    offsets[0] = 0 and offsets[G] = M, out (M, N). fp32 accumulation; `input_precision` applies to fp32 inputs."""
    (m, k), (g, k2, n) = a.shape, b.shape
    if k != k2 or out.shape != (m, n) or offsets.shape != (g + 1,):
        raise ValueError(f"shape mismatch: a {tuple(a.shape)}, b {tuple(b.shape)}, offsets {tuple(offsets.shape)}, "
                         f"out {tuple(out.shape)}")
    block_m, block_n, block_k, warps = CONFIGS["interpreter" if interpreting() else "gpu"]
    count = programs(a.device)
    _grouped_matmul_kernel[(count,)](
        a, b, out, offsets, g, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2),
        out.stride(0), out.stride(1), NUM_PROGRAMS=count, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        INPUT_PRECISION=input_precision, UPCAST=interpreting() and a.dtype == torch.bfloat16, num_warps=warps,
    )
    return out
