"""What XLA compiled a GEMM into, read from the optimized HLO of a compiled program (`compiled.as_text()`).

A row of a JAX GEMM names the implementation that runs and its operand types, so an fp8 GEMM that XLA widened
before multiplying is visible: on a GPU without an fp8 GEMM XLA converts the operands and calls the f16/bf16 one,
and on a CPU it converts them to f32 (jax 0.10's CPU HLO: `fusion(%a), calls=%wrapped_convert_computation` before
the dot's fusion).

What counts as the GEMM (xla/service/gpu/cublas_cudnn.cc, the call targets; xla/service/gpu/ir_emission_utils.h,
kTritonGemmFusionKind):
- a custom call to a library GEMM: "__cublas$gemm" (cuBLAS; hipBLAS on ROCm), "__cublas$lt$matmul" (cuBLASLt;
  hipBLASLt), "__cublas$lt$matmul$f8" (the fp8 one: cuBLASLt on NVIDIA, hipBLASLt on AMD), "__onednn$matmul"
  (oneDNN on a CPU); its first two operands are A and B;
- else a `dot` instruction, named with the custom fusion kind that holds it where one does ("__triton_gemm" for
  XLA's Triton GEMM emitter on GPUs, "__ynn_fusion" for YNNPACK on a CPU), else XLA's own emitter.
Operand types are read where the operand is defined (`%name = f8e4m3fn[...]`): recent HLO text prints operands by
name only, older (jax 0.4.38) with their shape before the name; both are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GEMM_TARGETS = {
    "__cublas$gemm": "cuBLAS/hipBLAS GEMM",
    "__cublas$lt$matmul": "cuBLASLt/hipBLASLt matmul",
    "__cublas$lt$matmul$f8": "cuBLASLt/hipBLASLt fp8 matmul",
    "__onednn$matmul": "oneDNN matmul",
}
# `%name = type[dims]...` or `%name = (type[dims]..., ...)`: the defined value's (first) element type
DEFINITION = re.compile(r"%?([\w.\-]+) = \(?([a-z][a-z0-9]*)\[")
INSTRUCTION = re.compile(r"%?([\w.\-]+) = .*?\s([a-z][\w\-]*)\((.*?)\)(?:,|$)")
# an operand: `%name`, or (older HLO text) `f32[64,32]{1,0} %name`
OPERAND = re.compile(r"(?:([a-z][a-z0-9]*)\[[^\]]*\](?:\{[^}]*\})?\s+)?%([\w.\-]+)")
TARGET = re.compile(r'custom_call_target="([^"]+)"')
CALLS = re.compile(r"calls=%?([\w.\-]+)")
FUSION_KIND = re.compile(r'"kind":"(__[\w$]+)"')
COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


@dataclass(frozen=True)
class Gemm:
    """One GEMM of a compiled program: what runs it and its A and B element types as it takes them."""

    implementation: str  # e.g. "__cublas$lt$matmul$f8", "dot in __triton_gemm", "dot"
    operand_types: tuple[str, ...]

    def __str__(self) -> str:
        described = GEMM_TARGETS.get(self.implementation)
        name = f"{self.implementation} ({described})" if described else self.implementation
        return f"{name} on {' x '.join(self.operand_types) or 'unknown operands'}"


def gemms(hlo: str) -> list[Gemm]:
    """Every GEMM of an optimized HLO module's text, in order."""
    types = {m.group(1): m.group(2) for m in DEFINITION.finditer(hlo)}
    fusion_kind = {}  # computation name -> custom fusion kind of the fusion calling it
    for line in hlo.splitlines():
        kind, called = FUSION_KIND.search(line), CALLS.search(line)
        if kind and called and " fusion(" in line:
            fusion_kind[called.group(1)] = kind.group(1)
    found, computation = [], ""
    for line in hlo.splitlines():
        header = COMPUTATION.match(line)
        if header and " = " not in line:
            computation = header.group(1)
            continue
        inst = INSTRUCTION.search(line)
        if not inst:
            continue
        opcode, operands = inst.group(2), _operand_types(inst.group(3), types)[:2]
        target = TARGET.search(line)
        if opcode == "custom-call" and target and target.group(1) in GEMM_TARGETS:
            found.append(Gemm(target.group(1), operands))
        elif opcode == "dot":
            kind = fusion_kind.get(computation)
            found.append(Gemm(f"dot in {kind}" if kind else "dot", operands))
    return found


def _operand_types(text: str, types: dict[str, str]) -> tuple[str, ...]:
    return tuple(m.group(1) or types.get(m.group(2), "?") for m in OPERAND.finditer(text))


def compiled_gemms(compiled: object) -> list[Gemm] | None:
    """The GEMMs of a jax compiled program (jax.stages.Compiled), None where its HLO text cannot be had."""
    try:
        text = compiled.as_text()  # type: ignore[attr-defined]
    except Exception:  # not every backend gives it
        return None
    return gemms(text) if isinstance(text, str) else None
