"""A tiled Triton GEMM, C = A @ B, fp32 accumulation, for NVIDIA and AMD GPUs (and the CPU interpreter).

The structure follows Triton's matrix-multiplication tutorial: one program per C tile, tiles ordered in
groups of GROUP_M rows so consecutive programs reuse B tiles from L2. Rows and columns beyond M and N
wrap (`% M`) instead of being masked on every load; only the K tail is masked, and the store is masked.
Autotune configs are chosen per vendor: AMD's compiler takes `waves_per_eu`, `matrix_instr_nonkdim` and
`kpack`, which NVIDIA's does not.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from xmfu.kernels.fit import gemm_pruner
from xmfu.kernels.matmul_persistent import FP8_PROMOTION, fp8_promotes


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def nvidia_configs() -> list[triton.Config]:
    c = triton.Config
    return [
        c({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
        c({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
        c({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
        c({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=4),
        c({"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
        c({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
        c({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
        c({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
        c({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
        c({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=2, num_stages=5),
    ]


def amd_configs() -> list[triton.Config]:
    c = triton.Config
    return [
        c({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 4, "waves_per_eu": 2,
           "matrix_instr_nonkdim": 16, "kpack": 2}, num_warps=8, num_stages=2),
        c({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 16, "GROUP_M": 4, "waves_per_eu": 2}, num_warps=8,
          num_stages=2),
        c({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 4, "waves_per_eu": 2,
           "matrix_instr_nonkdim": 16, "kpack": 2}, num_warps=8, num_stages=2),
        c({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 16, "GROUP_M": 1, "waves_per_eu": 2}, num_warps=4,
          num_stages=2),
        c({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 1, "waves_per_eu": 2,
           "matrix_instr_nonkdim": 16}, num_warps=8, num_stages=2),
        c({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "waves_per_eu": 3}, num_warps=4,
          num_stages=2),
        c({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 1, "waves_per_eu": 8}, num_warps=4,
          num_stages=2),
    ]


def interpreter_configs() -> list[triton.Config]:
    # One small tile: the interpreter runs each program in numpy, and autotuning it would time nothing real.
    return [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 4}, num_warps=4,
                          num_stages=1)]


def autotune_configs() -> list[triton.Config]:
    if interpreting():
        return interpreter_configs()
    return amd_configs() if getattr(torch.version, "hip", None) else nvidia_configs()


# Everything that changes the best config: the shape, the layout (strides: a transposed operand is read along
# another axis) and the input precision (ieee vs tf32 tl.dot). Triton 3.9's Autotuner adds the dtype of every
# tensor argument to this key itself (triton/runtime/autotuner.py, Autotuner.run).
KEY = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn", "INPUT_PRECISION"]


def _imprecise(args: dict) -> int:
    """max_num_imprecise_acc: min(128, BLOCK_K) for fp8 on an NVIDIA GPU (FP8_WGMMA), else 0.

    fp8 products then join the fp32 accumulator every min(128, BLOCK_K) of K (CUTLASS's promotion interval for its
    sm90 fp8 GEMM without fast accumulation, the mode torch._scaled_mm uses by default), not once over the whole K
    as Triton's sm90 default 2**30 would (backends/nvidia/compiler.py, max_num_imprecise_acc_default). Not 0: Triton
    will not use wgmma for an fp8 dot into fp32 with max_num_imprecise_acc < 32 (supportMMA, lib/Analysis/
    Utility.cpp: "We cannot use MMA_V3 if we need to accumulate in F32 within the MMA op") and falls back to mma.sync
    on operands widened to fp16 (decomposeMixedModeDotOp), a fraction of Hopper's fp8 rate. kernels/
    matmul_persistent.py's FP8_PROMOTION says the same; 0 elsewhere (AMD's MFMA accumulates fp8 in fp32, and 0 is
    Triton's own default for every other dtype, semantic.dot)."""
    return min(FP8_PROMOTION, args["BLOCK_K"]) if args["FP8_WGMMA"] else 0


# Each part tries the configs that fit it (kernels/fit.py: shared memory, registers, wgmma's 64 rows).
@triton.autotune(configs=autotune_configs(), key=KEY, prune_configs_by=gemm_pruner("matmul"))
@triton.heuristics({"IMPRECISE": _imprecise})
@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, INT64: tl.constexpr, FP8_WGMMA: tl.constexpr,
    IMPRECISE: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M  # (BLOCK_M,) wrapped: no row mask on loads
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N  # (BLOCK_N,)
    offs_k = tl.arange(0, BLOCK_K)
    step_a = BLOCK_K * stride_ak
    step_b = BLOCK_K * stride_bk
    if INT64:
        # Offsets are int32 (tl.arange, and int arguments below 2**31); an operand whose element offset reaches
        # 2**31 wraps (illegal address or silent corruption). Widen them, as Triton's tutorial 06 does
        # (`off_z.to(tl.int64) * stride_qz`). Only then: every other shape compiles exactly as before (a 64-bit
        # offset costs address arithmetic, and AMD's buffer loads are for operands within 2 GB anyway, Triton 3.9
        # backends/amd/compiler.py is_within_2gb).
        offs_am = offs_am.to(tl.int64)
        offs_bn = offs_bn.to(tl.int64)
        offs_k = offs_k.to(tl.int64)
        step_a = BLOCK_K * tl.cast(stride_ak, tl.int64)
        step_b = BLOCK_K * tl.cast(stride_bk, tl.int64)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak  # (BLOCK_M, BLOCK_K)
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn  # (BLOCK_K, BLOCK_N)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST:
            # Triton's interpreter mis-computes tl.dot on bf16 operands; bf16 x bf16 (and fp8 x fp8) products are
            # exact in fp32, so widening first gives the same fp32-accumulated result.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        # IMPRECISE (_imprecise): fp8 on Hopper promotes to fp32 every min(128, BLOCK_K) products, wgmma between
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION, max_num_imprecise_acc=IMPRECISE)
        a_ptrs += step_a
        b_ptrs += step_b

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if INT64:
        offs_cm = offs_cm.to(tl.int64)
        offs_cn = offs_cn.to(tl.int64)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


# The largest tile edge any config above uses: a program may form addresses up to one tile past an operand's edge
# (C's edge tiles are masked, not wrapped; the K tail is masked) and steps one BLOCK_K along K at a time.
TILE_MAX = 256
INT32_MAX = 2**31 - 1


def needs_int64_offsets(*tensors: torch.Tensor) -> bool:
    """Whether an element offset the kernel forms in any of these 2-D operands, up to one tile past its edges, can
    pass INT32_MAX: then the kernel computes offsets in int64 (INT64=True, a separate compiled variant)."""
    return any(sum((size + TILE_MAX) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
               > INT32_MAX for t in tensors)


UPCAST_IN_INTERPRETER = (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, input_precision: str | None = None) -> torch.Tensor:
    """out = a @ b. `input_precision` ("ieee", "tf32" or None for the default) applies to fp32 inputs. fp8 inputs
    (torch.float8_e4m3fn, Triton's fp8e4nv; torch.float8_e4m3fnuz, fp8e4b8) accumulate in fp32 into `out`'s dtype."""
    M, K = a.shape
    K2, N = b.shape
    if K != K2 or out.shape != (M, N):
        raise ValueError(f"shape mismatch: a {tuple(a.shape)}, b {tuple(b.shape)}, out {tuple(out.shape)}")
    upcast = interpreting() and a.dtype in UPCAST_IN_INTERPRETER
    int64 = needs_int64_offsets(a, b, out)

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    _matmul_kernel[grid](
        a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        INPUT_PRECISION=input_precision, UPCAST=upcast, INT64=int64, FP8_WGMMA=fp8_promotes(a),
    )
    return out


def best_config() -> str | None:
    """The autotuner's choice for the last shape it tuned (None before the first call)."""
    cfg = getattr(_matmul_kernel, "best_config", None)
    return str(cfg) if cfg is not None else None
