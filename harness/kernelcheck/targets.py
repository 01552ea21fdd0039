"""The GPU targets `xmfu kernels` compiles for, and the limits of each part that a compiled kernel is held to.

NVIDIA figures: the CUDA C++ Programming Guide, appendix "Compute Capabilities", table "Technical Specifications per
Compute Capability" (CUDA 13): shared memory per block (the opt-in maximum a kernel can ask for) and per SM, 64 K
32-bit registers per SM, resident warps and blocks per SM; 1 KB of each block's shared memory is reserved for the
system from compute capability 8.0 on, and registers are allocated per warp in units of 256. The per-block shared
memory limits agree with torch 2.13's inductor autoheuristic tables (166912 bytes for A100, 232448 for H100). Tensor
memory: 512 columns per SM on sm100 (Triton 3.9 compiler.py, CompiledKernel._init_handles, `max_tmem_size`).

AMD figures: LDS per workgroup and per CU, 64 KiB on CDNA3 (gfx942) and 160 KiB on CDNA4 (gfx950), as Triton 3.9's
own tests take them (triton/_internal_testing.py get_hip_lds_size); 4 SIMDs per CU. Waves per SIMD come from the
compiler itself (LLVM's `; Occupancy:` line of the AMDGCN, which counts VGPRs, AGPRs, SGPRs and waves_per_eu),
capped by LDS here since Triton's LDS is allocated at launch, not at compile time (`LDSByteSize: 0 ... (compile
time only)`).

SM/CU counts and XCDs are those of one part per target (the persistent kernel is compiled for its grid).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

KIB = 1024


@dataclass(frozen=True)
class Target:
    name: str  # sm90, gfx942: Triton's spelling (GPUTarget("cuda", 90, 32), GPUTarget("hip", "gfx942", 64))
    vendor: str  # nvidia | amd
    part: str  # the part whose processor count the persistent kernel is compiled for
    processors: int  # SMs or CUs of `part`
    xcds: int  # compute dies (AMD MI300-class); 1 elsewhere
    shared_per_block: int  # bytes a kernel may use (the opt-in maximum on NVIDIA; LDS per workgroup on AMD)
    shared_per_processor: int  # bytes per SM (the largest carveout) or per CU
    max_warps: int  # resident warps per SM (NVIDIA) or waves per SIMD (AMD)
    max_blocks: int  # resident blocks per SM (NVIDIA); 0 on AMD (LLVM's occupancy covers it)
    tensor_memory_columns: int = 0  # sm100's tensor memory per SM; 0 where there is none

    @property
    def nvidia(self) -> bool:
        return self.vendor == "nvidia"

    @property
    def capability(self) -> int:
        """90 for sm90 (NVIDIA only)."""
        return int(self.name.removeprefix("sm"))

    def gpu_target(self):  # -> triton.backends.compiler.GPUTarget (imported only where Triton is)
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.capability, 32) if self.nvidia else GPUTarget("hip", self.name, 64)

    @property
    def warp_unit(self) -> str:
        return "warps/SM" if self.nvidia else "waves/SIMD"


TARGETS = {t.name: t for t in (
    Target("sm80", "nvidia", "A100 SXM", 108, 1, 163 * KIB, 164 * KIB, 64, 32),
    Target("sm89", "nvidia", "L40S", 142, 1, 99 * KIB, 100 * KIB, 48, 24),
    Target("sm90", "nvidia", "H100 SXM", 132, 1, 227 * KIB, 228 * KIB, 64, 32),
    Target("sm100", "nvidia", "B200", 148, 1, 227 * KIB, 228 * KIB, 64, 32, tensor_memory_columns=512),
    Target("gfx942", "amd", "MI300X", 304, 8, 64 * KIB, 64 * KIB, 8, 0),
    Target("gfx950", "amd", "MI355X", 256, 8, 160 * KIB, 160 * KIB, 8, 0),
)}
DEFAULT_TARGETS = ("sm80", "sm90", "sm100", "gfx942", "gfx950")
# NVIDIA register file: 64 K 32-bit registers per SM, allocated per warp in units of 256 (CUDA occupancy calculator)
REGISTERS_PER_SM = 65536
REGISTER_UNIT = 256
RESERVED_SHARED_PER_BLOCK = 1 * KIB  # system use, compute capability 8.0 and later
SIMDS_PER_CU = 4


T = TypeVar("T")


class TargetError(ValueError):
    """A target name xmfu does not know: the message says which it knows."""


def chosen(text: str, table: dict[str, T], kind: str, error: type[ValueError]) -> tuple[T, ...]:
    """A comma-separated list of `table`'s names -> their values, in the order given, once each; an unknown name (or
    none) raises `error` naming it and what is allowed. `kind`: what a name names ("target", "kernel")."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown or not names:
        raise error(f"unknown {kind}{'s' if len(unknown) > 1 else ''} {', '.join(unknown) or '(none given)'}. "
                    f"Allowed: {', '.join(table)} (comma-separated)")
    return tuple(table[n] for n in dict.fromkeys(names))


def parse_targets(text: str) -> tuple[Target, ...]:
    """`sm80,sm90,gfx942` -> those targets, in the order given, once each."""
    return chosen(text, TARGETS, "target", TargetError)


@dataclass(frozen=True)
class Occupancy:
    resident: int  # warps per SM (NVIDIA) or waves per SIMD (AMD) that fit at once
    maximum: int
    unit: str  # "warps/SM" | "waves/SIMD"
    limiter: str  # what stops more: registers, shared memory, warps, blocks, LDS, the compiler's figure

    @property
    def fraction(self) -> float:
        return self.resident / self.maximum

    def __str__(self) -> str:
        return f"{self.resident}/{self.maximum} {self.unit} ({self.limiter})"


def nvidia_occupancy(target: Target, registers: int, shared: int, num_warps: int) -> Occupancy:
    """Resident warps per SM for a kernel of `registers` per thread, `shared` bytes per block and `num_warps` warps
    per block, as the CUDA occupancy calculator computes it (shared memory rounded up to 128-byte units)."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    block_shared = -(-(shared + RESERVED_SHARED_PER_BLOCK) // 128) * 128
    limits = {"warps": target.max_warps // num_warps, "blocks": target.max_blocks,
              "shared memory": target.shared_per_processor // block_shared,
              "registers": (REGISTERS_PER_SM // per_warp) // num_warps if per_warp else target.max_blocks}
    limiter = min(limits, key=lambda k: (limits[k], list(limits).index(k)))  # a tie: the hard limits first
    return Occupancy(limits[limiter] * num_warps, target.max_warps, target.warp_unit, limiter)


def amd_occupancy(target: Target, compiler_waves: int, shared: int, num_warps: int) -> Occupancy:
    """Waves per SIMD: LLVM's figure (registers, waves_per_eu) or fewer where LDS holds fewer workgroups per CU (a
    workgroup's num_warps waves spread over the CU's 4 SIMDs)."""
    if not shared:
        return Occupancy(compiler_waves, target.max_warps, target.warp_unit, "registers (LLVM)")
    lds_waves = (target.shared_per_processor // shared) * num_warps // SIMDS_PER_CU
    if lds_waves < compiler_waves:
        return Occupancy(lds_waves, target.max_warps, target.warp_unit, "LDS")
    return Occupancy(compiler_waves, target.max_warps, target.warp_unit, "registers (LLVM)")
