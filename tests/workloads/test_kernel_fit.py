"""Which autotune configs each part keeps (kernels/fit.py and the attention kernels' pruners): the rules on their own,
without a compiler (`xmfu kernels`, make test-kernels, compiles what they keep for every target)."""

from __future__ import annotations

import pytest
import torch

from xmfu.harness.machine import compat

if why := compat.triton_interpreter_too_old():  # Triton 3.2's autotuner asks for a driver when the kernels import
    pytest.skip(f"this stack cannot import the kernels without a GPU: {why}", allow_module_level=True)

from xmfu.kernels import fit, matmul
from xmfu.kernels import flash_attention as fa
from xmfu.kernels import flash_attention_common as common
from xmfu.kernels import flash_attention_fa2 as fa2
from xmfu.kernels import flash_decoding as decode
from xmfu.kernels import matmul_persistent_configs as persistent

ARCHS = ("sm80", "sm86", "sm89", "sm90", "sm100", "sm120", "gfx90a", "gfx942", "gfx950")
DTYPES = {"tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}


class _Target:
    """What Triton's driver answers (runtime/driver.py: get_current_target -> GPUTarget)."""

    def __init__(self, arch: str) -> None:
        self.backend, self.arch = ("cuda", int(arch[2:])) if arch.startswith("sm") else ("hip", arch)


class _Driver:
    def __init__(self, arch: str) -> None:
        self.arch = arch

    def get_current_target(self) -> _Target:
        return _Target(self.arch)


@pytest.fixture
def on(monkeypatch):
    """on(arch): Triton's active driver answers `arch`, as a GPU's (or `xmfu kernels`'s stand-in) does."""
    import triton

    def set_arch(arch: str) -> None:
        monkeypatch.setattr(type(triton.runtime.driver), "active", property(lambda self: _Driver(arch)))
    return set_arch


def test_the_target_is_the_one_triton_compiles_for(on):
    on("sm90")
    assert fit.current_arch() == "sm90" and fit.family("sm90") == "sm90"
    on("gfx942")
    assert fit.current_arch() == "gfx942"
    assert [fit.family(a) for a in ("sm80", "sm89", "sm100", "sm120", "gfx90a", "gfx950")] == \
        ["sm80", "sm80", "sm100", "sm80", "gfx942", "gfx950"]
    assert fit.shared_limit("sm90") == 227 * 1024 and fit.shared_limit("sm75") == 99 * 1024  # unnamed: the smallest


def _gemm_configs(arch: str, kernel: str) -> list:
    amd = arch.startswith("gfx")
    if kernel == "matmul":
        return matmul.amd_configs() if amd else matmul.nvidia_configs()
    return persistent.amd_configs() if amd else persistent.nvidia_configs()


@pytest.mark.parametrize("kernel", ["matmul", "pointer", "tma"])
@pytest.mark.parametrize("arch", ARCHS)
def test_every_part_and_dtype_keeps_a_gemm_config_that_fits_it(on, arch, kernel):
    on(arch)
    prune = fit.gemm_pruner(kernel)["early_config_prune"]
    for name, dtype in DTYPES.items():
        configs = _gemm_configs(arch, kernel)
        kept = prune(configs, {"a": torch.empty(1, dtype=dtype)})
        assert kept, (arch, name)
        e = torch.empty(1, dtype=dtype).element_size()
        for c in kept:
            assert fit.gemm_shared(c, arch, e, 4 if e == 4 else 2, kernel) <= fit.shared_limit(arch), (arch, name, c)
            if fit.capability(arch) >= 90:
                assert c.kwargs["BLOCK_M"] % 64 == 0  # wgmma / tcgen05 rows: no mma.sync fallback


def test_the_gemm_rules_drop_what_the_compiler_found_over_the_limits(on):
    """Cases `xmfu kernels` compiled (Triton 3.9, 4096^3): each over a limit, each pruned now."""
    def kept(arch: str, kernel: str, dtype: torch.dtype) -> set[tuple]:
        on(arch)
        configs = fit.gemm_pruner(kernel)["early_config_prune"](_gemm_configs(arch, kernel),
                                                                 {"a": torch.empty(1, dtype=dtype)})
        return {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages)
                for c in configs}

    assert (128, 256, 64, 8, 3) not in kept("sm80", "matmul", torch.float32)  # 192 KiB of 163
    assert (128, 256, 64, 8, 3) in kept("sm80", "matmul", torch.bfloat16)  # 96 KiB, 239 registers
    assert (32, 64, 32, 2, 5) not in kept("sm90", "matmul", torch.bfloat16)  # 32 rows: mma.sync
    assert (128, 256, 64, 8, 3) not in kept("sm90", "matmul", torch.float8_e4m3fn)  # 180 bytes of spills
    assert (128, 128, 64, 4, 3) not in kept("sm80", "pointer", torch.bfloat16)  # 32 bytes of spills
    assert (128, 128, 128, 8, 4) not in kept("sm90", "tma", torch.bfloat16)  # 288 KiB of 227
    assert kept("sm90", "tma", torch.float32) == {(128, 128, 32, 8, 3), (128, 128, 32, 8, 4), (128, 64, 32, 4, 3)}
    assert (256, 256, 64, 8, 2) not in kept("gfx942", "pointer", torch.bfloat16)  # 140-160 bytes of spills
    assert (64, 64, 32, 4, 2) not in kept("gfx942", "matmul", torch.bfloat16)  # waves_per_eu 8: 64 VGPRs, spills


def test_with_no_target_every_config_is_kept(monkeypatch):
    """The interpreter (or no GPU): Triton's driver has no target; nothing is pruned."""
    monkeypatch.setattr(fit, "current_arch", lambda: None)
    configs = matmul.nvidia_configs()
    assert fit.gemm_pruner("matmul")["early_config_prune"](configs, {}) == configs
    backward = common.vendor_configs("nvidia", fa.BWD_TILES["nvidia"])
    assert common.pruner(common.DKDV_ROWS, fa.DKDV_FITS)["early_config_prune"](backward, {}) == backward


def test_none_fits_keeps_the_smallest():
    configs = matmul.nvidia_configs()
    assert fit.keep_fitting(configs, lambda c: False, lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"]) == \
        [configs[-1]]


def _tiles(configs: list) -> list:
    return [common.tile_of(c) for c in configs]


def test_each_attention_kernel_keeps_its_parts_tiles(on):
    nvidia_bwd = common.vendor_configs("nvidia", fa.BWD_TILES["nvidia"])
    dkdv = common.pruner(common.DKDV_ROWS, fa.DKDV_FITS)["early_config_prune"]
    dq = common.pruner(common.DQ_ROWS)["early_config_prune"]
    on("sm90")
    assert _tiles(dkdv(nvidia_bwd, {})) == [(32, 64, 4, 2), (32, 128, 8, 2)]  # dK/dV's dots: BLOCK_N rows
    assert all(c.kwargs["BLOCK_M"] == 64 for c in dq(nvidia_bwd, {}))
    fused = common.pruner(common.BWD_ROWS, fa2.BWD_FITS)["early_config_prune"]
    assert _tiles(fused(common.vendor_configs("nvidia", fa2.BWD_TILES["nvidia"]), {})) == fa2.BWD_FITS["sm90"]
    on("sm80")
    assert dq(nvidia_bwd, {}) == nvidia_bwd  # mma.sync is sm80's own: every tile
    on("gfx942")
    forward = common.pruner(common.FWD_ROWS, fa.FWD_FITS)["early_config_prune"]
    assert _tiles(forward(common.vendor_configs("amd", fa.FWD_TILES["amd"]), {})) == [(128, 32, 4, 2)]
    split = decode.vendor_configs("amd", decode.TILES["amd"])
    assert [c.kwargs["BLOCK_N"] for c in fit.listed(decode.FITS, decode._tile)(split, {})] == [64, 32]


def test_every_listed_tile_is_one_of_its_vendors_configs():
    """A tile listed for a part but absent from the autotuner's configs would be silently dropped."""
    for module, fits in ((fa, fa.FWD_FITS), (fa, fa.DKDV_FITS), (fa2, fa2.FWD_FITS), (fa2, fa2.BWD_FITS)):
        for family, tiles in fits.items():
            vendor = "amd" if family.startswith("gfx") else "nvidia"
            source = module.FWD_TILES if fits in (fa.FWD_FITS, fa2.FWD_FITS) else module.BWD_TILES
            assert set(tiles) <= set(source[vendor]), (module.__name__, family)
    assert all(set(t) <= set(decode.TILES["amd"]) for t in decode.FITS.values())
