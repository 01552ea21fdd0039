"""What `xmfu kernels` holds a compiled kernel to, and the cases it already knows of.

A compile is a problem where it fails; where it spills registers; where its shared memory (LDS) passes what one
block (workgroup) may have on the part, or its tensor memory the 512 columns of an sm100 SM (a launch would fail:
Triton's CompiledKernel._init_handles raises OutOfResources); and where a kernel that multiplies bf16, fp16 or fp8
matrices does so without the part's own matrix instructions: mma.sync on sm90 or later (Hopper's wgmma and
Blackwell's tcgen05 are what their peaks are quoted for), or no matrix instruction at all (mma.sync on sm80/sm89,
MFMA on CDNA).

A mark names a problem already known (a fix under way, with its issue) or accepted (by design, with the reason);
anything else is new and fails `xmfu kernels` (exit 1) and its tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from xmfu.harness.kernelcheck.catalog import MMA_DTYPES
from xmfu.harness.kernelcheck.facts import Facts
from xmfu.harness.kernelcheck.targets import Target

COMPILE = "does not compile"
SPILLS = "spills registers"
SHARED = "shared memory over the part's limit"
TMEM = "tensor memory over the part's limit"
MMA_SYNC = "mma.sync on sm90+"
NO_MMA = "no matrix instructions"
EXPECTED = {80: "mma.sync", 89: "mma.sync", 90: "wgmma", 100: "tcgen05"}  # NVIDIA, by capability; AMD: MFMA


@dataclass(frozen=True)
class Problem:
    code: str  # one of the constants above
    detail: str  # the figures, in words
    mark: str = ""  # "known: ..." or "accepted: ..." where a Mark covers it; "" when new


@dataclass(frozen=True)
class Compiled:
    """What a compile is judged on: its place in the sweep and its Facts (None where it failed)."""

    entry: str
    kernel: str
    params: dict[str, Any]
    dtype: str
    target: Target
    facts: Facts | None
    error: str | None


def problems_of(c: Compiled) -> list[tuple[str, str]]:
    """(code, detail) of every problem of one compile."""
    if c.facts is None:  # not compiled: failed (error), or skipped with its reason (nothing to judge)
        return [(COMPILE, c.error)] if c.error else []
    f, t, found = c.facts, c.target, []
    if f.spill_bytes:
        unit = "per thread (ptxas)" if t.nvidia else "of scratch per lane (LLVM spilled registers)"
        found.append((SPILLS, f"{f.spill_bytes} bytes {unit}, {f.registers} registers"))
    if f.shared_bytes > t.shared_per_block:
        found.append((SHARED, f"{f.shared_bytes} bytes > {t.shared_per_block} per block on {t.name}"))
    if t.tensor_memory_columns and f.tensor_memory_columns > t.tensor_memory_columns:
        found.append((TMEM, f"{f.tensor_memory_columns} columns > {t.tensor_memory_columns}"))
    if f.dots and c.dtype in MMA_DTYPES:
        expected = EXPECTED.get(t.capability) if t.nvidia else "MFMA"
        if t.nvidia and t.capability >= 90 and "mma.sync" in f.families:
            found.append((MMA_SYNC, f"{f.family} for {f.dots} dot(s); {expected} expected"))
        elif expected and expected not in f.families:
            found.append((NO_MMA, f"{f.family} for {f.dots} dot(s); {expected} expected"))
    return found


@dataclass(frozen=True)
class Mark:
    kind: str  # known | accepted
    code: str
    why: str
    applies: Callable[[Compiled], bool]

    def label(self) -> str:
        return f"{self.kind}: {self.why}"


def _sm90_plus(c: Compiled) -> bool:
    return c.target.nvidia and c.target.capability >= 90


# Known and accepted problems. Issue 41's two "known" ones are gone, so their marks went with them (a stale mark
# fails the whole sweep): the tiled GEMM's fp8 fallback to mma.sync on sm90+ came from its 32-row config (32x64x32:
# wgmma and tcgen05 need 64 rows), not max_num_imprecise_acc, and the backward's 32-row configs reached the sweep
# because the attention pruner asked a tensor's device, which `xmfu kernels`'s meta tensors lack; both are pruned now
# for the target Triton compiles for (kernels/fit.py).
MARKS = (
    Mark("accepted", MMA_SYNC, "the split-KV decode tile's rows are the GQA group's query heads, padded to 16 "
         "(BLOCK_G): below wgmma's 64 rows; one query token per head is memory-bound, and padding to 64 rows would "
         "multiply 4x the zeros", lambda c: c.kernel == "_decode_split" and _sm90_plus(c)),
)


def judged(c: Compiled, marks: tuple[Mark, ...] = MARKS) -> tuple[Problem, ...]:
    out = []
    for code, detail in problems_of(c):
        mark = next((m for m in marks if m.code == code and m.applies(c)), None)
        out.append(Problem(code, detail, mark.label() if mark else ""))
    return tuple(out)


def stale_marks(compiled: list[Compiled], marks: tuple[Mark, ...] = MARKS) -> list[Mark]:
    """The marks no compile of a whole sweep needed: a problem fixed, whose mark must go."""
    return [m for m in marks if not any(m.applies(c) and m.code in {p for p, _ in problems_of(c)} for c in compiled)]
