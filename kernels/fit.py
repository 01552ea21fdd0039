"""Which autotune configs fit the part a kernel is compiled for: the target Triton compiles for, its shared memory
(LDS) per block, and the `prune_configs_by` rules xmfu's kernels share (kernels/matmul.py, matmul_persistent.py,
flash_attention*.py, flash_decoding.py).

The target is the one Triton itself compiles for (`triton.runtime.driver.active.get_current_target()`: the GPU's
on a GPU; the stand-in's in `xmfu kernels`, which compiles for a GPUTarget on a CPU), so a config pruned on a part
is pruned in its ahead-of-time compile too. Triton's Autotuner calls `early_config_prune(configs, named_args,
**kwargs)` once per new key and refuses an empty answer (triton 3.9 runtime/autotuner.py, prune_configs): every
rule here keeps at least one config, the smallest, when none fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import triton

KIB = 1024
# Shared memory one block may use (the opt-in maximum): CUDA C++ Programming Guide, "Technical Specifications per
# Compute Capability" (CUDA 13): 163 KiB on 8.0 and 8.7, 99 KiB on 8.6, 8.9 and 12.x, 227 KiB on 9.0 and 10.x.
# LDS per workgroup: 64 KiB on CDNA3 (gfx942), 160 KiB on CDNA4 (gfx950) (Triton 3.9 _internal_testing.py,
# get_hip_lds_size). Parts not named: the smallest of their vendor's (a config pruned there is one lost, a config
# kept that does not fit is a launch that fails).
SHARED_PER_BLOCK = {"sm80": 163 * KIB, "sm86": 99 * KIB, "sm87": 163 * KIB, "sm89": 99 * KIB, "sm90": 227 * KIB,
                    "sm100": 227 * KIB, "sm103": 227 * KIB, "sm120": 99 * KIB, "gfx942": 64 * KIB,
                    "gfx950": 160 * KIB}
SMALLEST = {"sm": 99 * KIB, "gfx": 64 * KIB}
# mbarriers and the like beside the tiles: the compiler's figures run up to 0.1 KiB over the tiles alone
# (persistent_tma fp8 128x128x64 s4 on sm90: 96.1 KiB for 96 KiB of tiles)
OVERHEAD = 1 * KIB


def current_arch() -> str | None:
    """"sm90", "gfx942": the target Triton compiles for now; None where there is none (the interpreter, no GPU)."""
    try:
        target = triton.runtime.driver.active.get_current_target()
    except Exception:  # no active driver: no GPU, or TRITON_INTERPRET
        return None
    if target.backend == "cuda":
        return f"sm{target.arch}"
    return str(target.arch) if target.backend == "hip" else None


def capability(arch: str) -> int:
    """90 for sm90; 0 for an AMD part."""
    return int(arch[2:]) if arch.startswith("sm") else 0


def family(arch: str) -> str:
    """The part whose tile lists `arch` takes: sm80 (Ampere, Ada and the 12.x parts: mma.sync), sm90 (Hopper,
    wgmma), sm100 (data-centre Blackwell, 10.x and 11.x: tcgen05), gfx950 (CDNA4) or gfx942 (CDNA3 and any other
    AMD part)."""
    if arch.startswith("sm"):
        cap = capability(arch)
        return "sm90" if 90 <= cap < 100 else "sm100" if 100 <= cap < 120 else "sm80"
    return "gfx950" if arch == "gfx950" else "gfx942"


def shared_limit(arch: str) -> int:
    return SHARED_PER_BLOCK.get(arch, SMALLEST[arch[:2] if arch.startswith("sm") else "gfx"])


def _first_tensor(named_args: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """The launch's first tensor argument, or a tensor descriptor's base tensor; None where there is none."""
    for value in [*named_args.values(), *kwargs.values()]:
        base = getattr(value, "base", value)  # triton.tools.tensor_descriptor.TensorDescriptor keeps its tensor
        if hasattr(base, "element_size") and hasattr(base, "dtype"):
            return base
    return None


def element_bytes(named_args: dict[str, Any], kwargs: dict[str, Any]) -> int:
    """Bytes per operand element: the first tensor argument's (2 where there is none)."""
    tensor = _first_tensor(named_args, kwargs)
    return tensor.element_size() if tensor is not None else 2


def is_fp8(named_args: dict[str, Any], kwargs: dict[str, Any]) -> bool:
    tensor = _first_tensor(named_args, kwargs)
    return tensor is not None and "float8" in str(tensor.dtype)


def keep_fitting(configs: list[Any], fits: Callable[[Any], bool], size: Callable[[Any], float]) -> list[Any]:
    """The configs that fit, in their order; the smallest by `size` where none does (Triton needs one)."""
    kept = [c for c in configs if fits(c)]
    return kept or [min(configs, key=size)]


def listed(tiles: dict[str, list[tuple]], tile_of: Callable[[Any], tuple]) -> Callable[..., list[Any]]:
    """An early_config_prune keeping the configs whose tile (`tile_of(config)`) the current part's family lists;
    every config where no target is known (the interpreter) or the family lists none of them."""
    def prune(configs: list[Any], named_args: dict, **kwargs: Any) -> list[Any]:
        arch = current_arch()
        if arch is None:
            return configs
        wanted = set(tiles.get(family(arch), ()))
        return [c for c in configs if tile_of(c) in wanted] or configs
    return prune


def union(lists: Iterable[list[tuple]]) -> list[tuple]:
    """Every tile of the lists once, in first-seen order (the autotuner's configs: each family prunes to its own)."""
    return list(dict.fromkeys(t for tiles in lists for t in tiles))


# GEMM tiles (kernels/matmul.py, kernels/matmul_persistent.py): what a config holds, per operand element size e.
# - Shared memory: the pipeline's A and B buffers, (BLOCK_M + BLOCK_N) x BLOCK_K x e each: num_stages of them on
#   sm90+ (TMA/wgmma pipelines), num_stages - 1 before (cp.async on sm80: 192 KiB for tf32 128x256x64 s3) and on
#   gfx942 (one LDS buffer at num_stages 2), num_stages on gfx950 with 1/16 of padding (131.9 KiB for bf16
#   256x256x64 s2). The persistent kernels stage the output tile too, BLOCK_M x BLOCK_N x out bytes (the TMA
#   store's buffer; the pointer kernel's layout conversion took 8-32 KiB of 16-bit and up to 128 KiB of fp32), and
#   the TMA kernel's tf32 on sm100 2 x BLOCK_N x BLOCK_K x 4 more (320 KiB for 128x128x64 s3: 192 + 64 + 64).
# - Registers: the fp32 accumulator's share per thread, BLOCK_M x BLOCK_N / threads, with what the K step holds
#   (BLOCK_K x e bytes a row). From `xmfu kernels` (Triton 3.9, 4096^3): on NVIDIA a 128-register accumulator spills
#   with a 256-byte K step (persistent bf16 128x256x128 w8 on sm80: 172-180 bytes) or with 4 warps and a 128-byte
#   one (persistent bf16 128x128x64 w4 on sm80: 32 bytes), and tf32 (every target) and fp8 on sm90 (whose wgmma
#   reads B through registers when it is N-major) spill from 128 registers on (matmul fp8 128x256x64 w8 on sm90:
#   180 bytes; persistent tf32 128x128x64 w4 on sm90: 1576) and with 512-byte K steps (persistent tf32 128x128x128
#   w8 on sm90: 444). On AMD (64 lanes a wave) a 128-register accumulator fits with a 32-64-byte K step in the
#   tutorial kernel (matmul bf16 256x256x32 w8: 212 VGPRs on gfx942) but not with fp8's 16 bytes on gfx950 (68
#   bytes), and the persistent kernel, whose peeled K tail holds a second set of operands, spills from 128 on
#   (bf16 256x256x64 w8: 140-236 bytes on gfx942/gfx950); waves_per_eu 8 leaves 64 VGPRs, too few but for fp8
#   (matmul bf16 64x64x32: 32 bytes on gfx942).
# - wgmma and tcgen05 need a dot's M (BLOCK_M) to be a multiple of 64 (Triton's supportMMA, lib/Analysis/
#   Utility.cpp); a smaller one falls back to mma.sync (matmul 32x64x32 on sm90 and sm100).
MMA_ROWS = 64


def gemm_shared(c: Any, arch: str, e: int, out_bytes: int, kernel: str) -> float:
    """Estimated shared memory (LDS) bytes of GEMM config `c` (see above); `kernel`: matmul | pointer | tma."""
    bm, bn, bk, stages = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_stages
    fam = family(arch)
    buffers = stages - 1 if fam in ("sm80", "gfx942") else stages
    tiles = max(buffers, 1) * (bm + bn) * bk * e * (17 / 16 if fam == "gfx950" else 1)
    if kernel != "matmul" and arch.startswith("sm"):
        tiles += bm * bn * out_bytes
    if kernel == "tma" and fam == "sm100" and e == 4:
        tiles += 2 * bn * bk * 4
    return tiles + OVERHEAD


def gemm_registers_fit(c: Any, arch: str, e: int, fp8: bool, kernel: str) -> bool:
    """Whether config `c`'s accumulator and K step fit the registers without spilling (the figures above)."""
    bm, bn, bk, warps = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps
    k_bytes = bk * e
    if arch.startswith("gfx"):
        acc = bm * bn / (64 * warps)
        if c.kwargs.get("waves_per_eu", 0) >= 8 and not fp8:
            return False
        if kernel != "matmul":
            return acc <= 64 and k_bytes <= 128
        return acc <= 64 or (acc <= 128 and 32 <= k_bytes <= 64)
    if capability(arch) >= 90 and bm % MMA_ROWS:
        return False
    acc = bm * bn / (32 * warps)
    if e == 4 or (fp8 and family(arch) == "sm90"):
        return acc <= 64 and k_bytes <= 256
    return acc <= 64 or (acc <= 128 and k_bytes <= 128 and (warps >= 8 or k_bytes <= 64))


def gemm_pruner(kernel: str) -> dict[str, Callable[..., list[Any]]]:
    """triton.autotune's prune_configs_by for a GEMM kernel (matmul | pointer | tma): the configs whose shared
    memory fits the part and whose registers do not spill there, by the operands' element size."""
    def prune(configs: list[Any], named_args: dict, **kwargs: Any) -> list[Any]:
        arch = current_arch()
        if arch is None:
            return configs
        e, fp8 = element_bytes(named_args, kwargs), is_fp8(named_args, kwargs)
        out = 4 if e == 4 else 2  # fp32 out for fp32/tf32, bf16 for fp8 (workloads/matmul/triton.py), else e
        limit = shared_limit(arch)

        def size(c: Any) -> float:
            return gemm_shared(c, arch, e, out, kernel)
        return keep_fitting(configs, lambda c: size(c) <= limit and gemm_registers_fit(c, arch, e, fp8, kernel),
                            size)
    return {"early_config_prune": prune}
