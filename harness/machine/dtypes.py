"""The dtypes xmfu knows, and how inputs of each are made from one seeded generator.

Every backend receives the same values: inputs are drawn once in float32, rounded to the dtype's
representable values here (with ml_dtypes, so no framework is needed), and each backend only casts.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    storage: type  # numpy/ml_dtypes type holding the operand values
    itemsize: int  # bytes per operand element
    output_itemsize: int  # bytes per element of a matmul result
    description: str


DTYPES: dict[str, DType] = {
    "fp32": DType("fp32", np.float32, 4, 4, "IEEE fp32 inputs and arithmetic (no TF32 or bf16x3 shortcuts)"),
    "tf32": DType("tf32", np.float32, 4, 4, "fp32 storage, TF32 tensor-core inputs, fp32 accumulate"),
    "bf16": DType("bf16", ml_dtypes.bfloat16, 2, 2, "bf16 inputs and output, fp32 accumulate"),
    "fp16": DType("fp16", np.float16, 2, 2, "fp16 inputs and output, fp32 accumulate"),
    "fp8": DType("fp8", ml_dtypes.float8_e4m3fn, 1, 2, "fp8 e4m3 inputs, bf16 output, fp32 accumulate"),
}


def uniform_inputs(seed: int, shapes: dict[str, tuple[int, ...]], dtype: str) -> dict[str, np.ndarray]:
    """Inputs uniform in [-1, 1], rounded to `dtype`, returned as float32 arrays.

    Uniform [-1, 1] rather than zeros or ones: constant data lowers power draw and overstates throughput
    (CUTLASS profiler guidance). The values are already representable in `dtype`, so a backend's cast is exact.
    """
    rng = np.random.default_rng(seed)
    storage = DTYPES[dtype].storage
    out = {}
    for name, shape in shapes.items():
        x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        out[name] = x.astype(storage).astype(np.float32)
    return out
