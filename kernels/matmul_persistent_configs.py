"""The persistent matmul kernel's autotune configs per target (NVIDIA, AMD, the interpreter on a CPU), and the
tensor-descriptor block shapes the TMA variant takes from them."""

from __future__ import annotations

import os

import torch
import triton


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def nvidia_configs() -> list[triton.Config]:
    # Tutorial 09's matmul_get_configs: BLOCK_M 128, BLOCK_N 128/256, BLOCK_K 64/128, 3/4 stages, 4/8 warps; and
    # 128x128x32 tiles of 8 warps, which tf32 fits on sm80, sm90 and sm100 (kernels/fit.py: every tutorial tile of
    # tf32 spills or passes the shared memory there: 144-896 KiB, 56-20324 bytes of spills), and a 128x64x32 one for
    # tf32 on the 99 KiB parts (sm86, sm89, sm120).
    c = triton.Config
    tutorial = [c({"BLOCK_M": 128, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
                for bn in (128, 256) for bk in (64, 128) for s in (3, 4) for w in (4, 8)]
    return tutorial + [c({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=s, num_warps=8)
                       for s in (3, 4)] + [c({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
                                             num_stages=3, num_warps=4)]


def amd_configs() -> list[triton.Config]:
    # ROCm's persistent_gemm configs (BLOCK_K 64 throughout, 2 stages), plus one 128x128 tile for shapes too small to
    # give every CU a 256x256 tile, and a 128x128x32 one of 8 waves for tf32 (whose 64-wide K steps pass gfx942's
    # LDS or spill: kernels/fit.py).
    c = triton.Config
    amd = {"waves_per_eu": 2, "matrix_instr_nonkdim": 16, "kpack": 1}
    return [
        c({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 1, **amd}, num_warps=8, num_stages=2),
        c({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 4, "waves_per_eu": 0}, num_warps=8, num_stages=2),
        c({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, **amd}, num_warps=8, num_stages=2),
        c({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 6, "waves_per_eu": 2}, num_warps=8, num_stages=2),
        c({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 4, **amd}, num_warps=4, num_stages=2),
        c({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 4, **amd}, num_warps=8, num_stages=2),
    ]


def interpreter_configs() -> list[triton.Config]:
    # kernels/matmul.py's interpreter tile: the interpreter's time goes by tile steps, and smaller tiles made the
    # matmul smoke run 12 s longer. With INTERPRETER_SMS programs, shapes past 2 x 1 tiles loop (the persistent path).
    return [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 2}, num_warps=4, num_stages=1)]


def autotune_configs() -> list[triton.Config]:
    if interpreting():
        return interpreter_configs()
    return amd_configs() if getattr(torch.version, "hip", None) else nvidia_configs()


def with_descriptor_shapes(configs: list[triton.Config]) -> list[triton.Config]:
    """The same configs, each setting the descriptors' tile shape before its launch (a host-side descriptor carries
    its block shape; the autotuner calls a config's pre_hook with every argument, triton/runtime/autotuner.py)."""
    def hook(nargs: dict) -> None:
        bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
        nargs["a_desc"].block_shape = [bk, bm] if nargs["A_COLMAJOR"] else [bm, bk]
        nargs["b_desc"].block_shape = [bn, bk] if nargs["B_COLMAJOR"] else [bk, bn]
        nargs["c_desc"].block_shape = [bm, bn]

    return [triton.Config(c.kwargs, num_warps=c.num_warps, num_stages=c.num_stages, pre_hook=hook) for c in configs]
