"""What `xmfu kernels` reads from a compile (harness/kernelcheck/facts.py) and the occupancy it computes from it
(targets.py), on the compilers' own output: excerpts of ptxas 13's `-v` log and PTX as Triton 3.9 made them here
for kernels/matmul.py on sm90, and of the AMDGCN Triton 3.9's AMD backend (LLVM) wrote for gfx950."""

from __future__ import annotations

import pytest

from xmfu.harness.kernelcheck.facts import amd_facts, dots_in, family_of, nvidia_facts
from xmfu.harness.kernelcheck.targets import TARGETS, TargetError, amd_occupancy, nvidia_occupancy, parse_targets

PTXAS_LOG = """ptxas-blackwell info    : 0 bytes gmem
ptxas-blackwell info    : Compiling entry function '_matmul_kernel' for 'sm_90a'
ptxas-blackwell info    : Function properties for _matmul_kernel
    160 bytes stack frame, 160 bytes spill stores, 160 bytes spill loads
ptxas-blackwell info    : Used 255 registers, used 1 barriers, 160 bytes cumulative stack size
ptxas-blackwell info    : Compile time = 1543.758 ms
"""
PTX = """
\twgmma.fence.sync.aligned;
\twgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%r290,%r291}, %rd7, %rd12, %p35, 1, 1, 0, 1;
\twgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%r290,%r291}, %rd8, %rd14, %p35, 1, 1, 0, 1;
\twgmma.commit_group.sync.aligned;
\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 { %r261, %r262, %r263, %r264 }, { %r253 }, { %r257 }, { %r261 };
\t@%p7 tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd2, %rd3, %r4, %p5;
"""
AMDGCN = """\tv_mfma_f32_32x32x16_bf16 a[0:15], v[2:5], v[6:9], a[0:15]
\tv_mfma_f32_32x32x16_bf16 a[16:31], v[2:5], v[10:13], a[16:31]
; NumVgprs: 256
; NumAgprs: 0
; TotalNumVgprs: 256
; ScratchSize: 140
; Occupancy: 2
amdhsa.kernels:
  - .agpr_count:     0
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 140
    .sgpr_count:     20
    .sgpr_spill_count: 0
    .vgpr_count:     256
    .vgpr_spill_count: 35
    .wavefront_size: 64
"""


def test_nvidia_facts_from_ptxas_log_and_ptx():
    f = nvidia_facts(PTX, PTXAS_LOG, shared=147456, num_warps=8, num_stages=3, dots=1)
    assert (f.registers, f.spill_bytes, f.stack_bytes, f.shared_bytes) == (255, 160, 160, 147456)
    # the distinct matrix instructions, each once; fences and commits are not products
    assert f.instructions == ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
                              "tcgen05.mma.cta_group::1.kind::f16",
                              "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16")
    assert f.families == ("mma.sync", "tcgen05", "wgmma") and f.family == "mma.sync+tcgen05+wgmma"


def test_a_log_without_a_register_count_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="no register count"):
        nvidia_facts(PTX, "", 0, 4, 3)


def test_amd_facts_from_the_kernel_metadata():
    f = amd_facts(AMDGCN, shared=98304, num_warps=8, num_stages=2, dots=1)
    assert (f.registers, f.spill_bytes, f.stack_bytes, f.compiler_waves) == (256, 140, 140, 2)
    assert f.family == "MFMA" and f.instructions == ("v_mfma_f32_32x32x16_bf16",)
    no_spill = AMDGCN.replace(".vgpr_spill_count: 35", ".vgpr_spill_count: 0")
    assert amd_facts(no_spill, 0, 8, 2).spill_bytes == 0  # scratch without spilled registers is not a spill
    assert amd_facts(AMDGCN.replace("v_mfma", "v_fma"), 0, 8, 2).family == "none"


def test_families_and_dots():
    assert [family_of(i) for i in ("wgmma.mma_async.sync", "tcgen05.mma.cta_group::2", "mma.sync.aligned",
                                   "v_mfma_f32_16x16x16_bf16", "v_wmma_f32_16x16x16_f16")] == \
        ["wgmma", "tcgen05", "mma.sync", "MFMA", "WMMA"]
    ttir = ("%78 = tt.dot %54, %76, %77, inputPrecision = tf32 : tensor<128x64xbf16> * tensor<64x128xbf16>\n"
            "%80 = tt.dot_scaled %1 scale %2, %3 scale %4, %5\n")
    assert dots_in(ttir) == 2


def test_nvidia_occupancy_as_the_cuda_calculator_counts_it():
    h100 = TARGETS["sm90"]
    # 255 registers: 8160 per warp, rounded to 8192 -> 8 warps of 65536; one 8-warp block, shared memory allows 1 too
    # (147456 + 1024 reserved = 148480 of 233472): a tie goes to the structural limit first
    occ = nvidia_occupancy(h100, 255, 147456, 8)
    assert (occ.resident, occ.maximum, occ.limiter) == (8, 64, "shared memory")
    assert str(occ) == "8/64 warps/SM (shared memory)"
    occ = nvidia_occupancy(h100, 128, 16384, 4)  # 4096 per warp -> 16 warps -> 4 blocks; shared allows 13
    assert (occ.resident, occ.limiter) == (16, "registers")
    assert nvidia_occupancy(h100, 24, 0, 8).limiter == "warps"  # 8 blocks of 8 warps fill the SM
    ada = TARGETS["sm89"]  # 48 warps, 24 blocks, 100 KB per SM
    assert nvidia_occupancy(ada, 32, 0, 1).resident == 24  # the block limit
    assert nvidia_occupancy(ada, 32, 50 * 1024, 4).resident == 4  # 51 KB + 1 KB reserved: one block


def test_amd_occupancy_takes_llvms_figure_capped_by_lds():
    mi300 = TARGETS["gfx942"]
    assert str(amd_occupancy(mi300, 4, 0, 4)) == "4/8 waves/SIMD (registers (LLVM))"
    # 32 KiB of 64: two workgroups of 8 waves per CU, 4 waves per SIMD
    assert amd_occupancy(mi300, 8, 32 * 1024, 8).resident == 4
    assert amd_occupancy(mi300, 8, 32 * 1024, 8).limiter == "LDS"
    assert amd_occupancy(mi300, 2, 32 * 1024, 8).limiter == "registers (LLVM)"


def test_targets_parse_in_order_once_each_and_name_what_is_allowed():
    assert [t.name for t in parse_targets("gfx942, sm90,gfx942")] == ["gfx942", "sm90"]
    with pytest.raises(TargetError, match=r"unknown target sm91\. Allowed: sm80, sm89, sm90, sm100, gfx942"):
        parse_targets("sm90,sm91")
    with pytest.raises(TargetError, match="none given"):
        parse_targets(",")
    # limits per part: CUDA's "Technical Specifications per Compute Capability"; Triton's LDS sizes
    assert {n: t.shared_per_block for n, t in TARGETS.items()} == {
        "sm80": 166912, "sm89": 101376, "sm90": 232448, "sm100": 232448, "gfx942": 65536, "gfx950": 163840}
