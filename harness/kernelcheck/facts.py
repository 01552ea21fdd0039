"""What one compile made, read from the compiler's own output: the matrix instructions in the PTX or AMDGCN, and the
registers, spills and stack ptxas reports (`-v`, which Triton 3.9 always passes; its log printed with
knobs.nvidia.dump_ptxas_log) or LLVM writes into the AMDGCN (the kernel's metadata: `.vgpr_count`, `.agpr_count`,
`.vgpr_spill_count`, `.sgpr_spill_count`, `.private_segment_fixed_size`; the `; Occupancy:` comment).

Instruction families: wgmma (Hopper's warpgroup MMA, `wgmma.mma_async`), tcgen05 (Blackwell's `tcgen05.mma`),
mma.sync (the warp-level MMA of sm80 and later), MFMA (`v_mfma_*`, CDNA), WMMA (`v_wmma_*`, RDNA); none: the kernel
has no matrix instruction (its products, if any, run on the FMA units).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PTX_MMA = re.compile(r"^\s*(?:@%?\w+\s+)?((?:wgmma\.mma_async|tcgen05\.mma|mma\.sync|mma\.sp)[\w.:]*)", re.M)
AMD_MMA = re.compile(r"^\s*(v_(?:mfma|smfmac|wmma)_\w+)", re.M)
FAMILY = (("wgmma.", "wgmma"), ("tcgen05.", "tcgen05"), ("mma.", "mma.sync"), ("v_mfma", "MFMA"),
          ("v_smfmac", "MFMA"), ("v_wmma", "WMMA"))


@dataclass(frozen=True)
class Facts:
    instructions: tuple[str, ...]  # the distinct matrix instructions, sorted
    registers: int  # per thread (NVIDIA: ptxas); per lane, VGPRs and AGPRs together (AMD)
    spill_bytes: int  # NVIDIA: bytes of spill stores per thread (ptxas); AMD: scratch bytes per lane where
    #                   the compiler spilled registers (.vgpr_spill_count or .sgpr_spill_count > 0), else 0
    stack_bytes: int  # NVIDIA: the stack frame per thread; AMD: the private segment (scratch) per lane
    shared_bytes: int  # shared memory / LDS per block, as Triton allocates it at launch (metadata.shared)
    num_warps: int
    num_stages: int
    dots: int = 0  # tt.dot operations in the TTIR: the matrix products the kernel asks for
    compiler_waves: int = 0  # AMD: LLVM's occupancy, waves per SIMD (registers, waves_per_eu); 0 on NVIDIA
    tensor_memory_columns: int = 0  # sm100: Triton's metadata.tmem_size; 0 where none is used

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({family_of(i) for i in self.instructions}))

    @property
    def family(self) -> str:
        return "+".join(self.families) or "none"


def family_of(instruction: str) -> str:
    return next(name for prefix, name in FAMILY if instruction.startswith(prefix))


def _ints(pattern: str, text: str) -> list[int]:
    return [int(x) for x in re.findall(pattern, text, re.M)]


def dots_in(ttir: str) -> int:
    return len(re.findall(r"= tt\.dot(?:_scaled)? ", ttir))


def nvidia_facts(ptx: str, ptxas_log: str, shared: int, num_warps: int, num_stages: int, dots: int = 0,
                 tmem: int | None = None) -> Facts:
    """From the PTX and ptxas' `-v` log: `Used 168 registers`, `160 bytes stack frame, 160 bytes spill stores, 160
    bytes spill loads` (one line per function; the largest is the kernel's own)."""
    registers = _ints(r"Used (\d+) registers", ptxas_log)
    if not registers:
        raise ValueError(f"no register count in ptxas' log: {ptxas_log[-500:]!r}")
    return Facts(tuple(sorted(set(PTX_MMA.findall(ptx)))), max(registers),
                 max(_ints(r"(\d+) bytes spill stores", ptxas_log), default=0),
                 max(_ints(r"(\d+) bytes stack frame", ptxas_log), default=0), shared, num_warps, num_stages,
                 dots, tensor_memory_columns=tmem or 0)


def _metadata(amdgcn: str, key: str) -> int:
    found = _ints(rf"^\s*-?\s*\.{key}:\s+(\d+)", amdgcn)
    if not found:
        raise ValueError(f"no .{key} in the AMDGCN's metadata")
    return max(found)


def amd_facts(amdgcn: str, shared: int, num_warps: int, num_stages: int, dots: int = 0) -> Facts:
    """From the AMDGCN: its MFMA/WMMA instructions and the kernel's metadata (LLVM's AMDGPU code object v5 notes)."""
    spilled = _metadata(amdgcn, "vgpr_spill_count") + _metadata(amdgcn, "sgpr_spill_count")
    scratch = _metadata(amdgcn, "private_segment_fixed_size")
    waves = _ints(r"^; Occupancy: (\d+)", amdgcn)
    total = _ints(r"^; TotalNumVgprs: (\d+)", amdgcn)  # VGPRs and AGPRs, as the unified register file holds them
    registers = max(total) if total else _metadata(amdgcn, "vgpr_count") + _metadata(amdgcn, "agpr_count")
    return Facts(tuple(sorted(set(AMD_MMA.findall(amdgcn)))), registers, scratch if spilled else 0,
                 scratch, shared, num_warps, num_stages, dots, compiler_waves=min(waves) if waves else 0)
