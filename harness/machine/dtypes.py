"""The dtypes xmfu knows, and how inputs of each are made from one seeded generator.

Every backend receives the same values: inputs are drawn once in float32, rounded to the dtype's
representable values here (with ml_dtypes, so no framework is needed), and each backend only casts.

"fp8" is the 8-bit float the device's matrix units take, its fp8 format (`fp8_format`): OCP `e4m3fn`
(bias 7, max 448, NaN only), `e4m3fnuz` (bias 8, max 240, no negative zero: its one NaN takes that code), or `e5m2`
(bias 15, max 57344, IEEE-like) on parts that refuse e4m3fn (Trainium 1 and 2, machine/peaks.yaml `fp8_formats`).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    # storage: the OCP variant; values are rounded with storage("fp8", format), the device's variant
    "fp8": DType("fp8", ml_dtypes.float8_e4m3fn, 1, 2,
                 "fp8 inputs in the device's format (e4m3fn; e4m3fnuz on AMD gfx94x; e5m2 on Trainium 1/2), "
                 "bf16 output, fp32 accumulate"),
}
# The fp8 formats xmfu rounds inputs to: the ones a torch tensor can hold (torch.float8_e4m3fn, float8_e4m3fnuz,
# float8_e5m2) and ml_dtypes can round to. A part's other encodings (Trainium's IEEE-style e4m3, MXFP8's block
# scales) have no torch dtype, so inputs cannot be made in them.
FP8_STORAGE = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
               "e5m2": ml_dtypes.float8_e5m2}
FP8_FORMATS = tuple(FP8_STORAGE)


def fp8_format(platform_kind: str, arch: str | None, formats: Sequence[str] | None = None) -> str | None:
    """The fp8 format a device's matrix units take. `formats` is the part's own list where the peak table has one
    (peaks.yaml `fp8_formats`, in the vendor's order): the first of them xmfu can make inputs in (FP8_STORAGE), or
    None when it can make none of them. Without a list: `e4m3fnuz` on AMD CDNA3 (gfx94x: MI300X, MI300A, MI325X),
    OCP `e4m3fn` everywhere else, AMD gfx950 (MI350X/MI355X) included.

    Trainium 1 and 2 list [e5m2, e4m3]: Neuron's compiler refuses F8E4M3FN there (NCC_EVRF051, "only supported on
    Trainium3 (Trn3) and later") and their e4m3 is the IEEE-style one no torch dtype holds, so e5m2 it is.

    torch agrees: torch._scaled_mm takes the fnuz types on gfx942 (`_scaled_mm_is_fnuz()` in
    aten/src/ATen/native/cuda/ScaledBlas.cpp) and "gfx950 and gfx120x only support OCP fp8"
    (ScaledBlasDeviceUtils.cpp); ROCm's precision-support page describes the CDNA3 float8 as having no infinity or
    signed zero, NaN being negative zero (the fnuz encoding).
    """
    if formats:
        return next((f for f in formats if f in FP8_STORAGE), None)
    base = (arch or "").split(":")[0]
    return "e4m3fnuz" if platform_kind == "rocm" and base.startswith("gfx94") else "e4m3fn"


def fp8_max(fmt: str) -> float:
    """Largest finite value of an fp8 format (448 for e4m3fn, 240 for e4m3fnuz, 57344 for e5m2), from ml_dtypes."""
    return float(ml_dtypes.finfo(FP8_STORAGE[fmt]).max)


def storage(dtype: str, fp8: str | None = None) -> type:
    """The numpy/ml_dtypes type whose values `dtype` holds; fp8 needs its format (never a guessed one)."""
    if dtype != "fp8":
        return DTYPES[dtype].storage
    if fp8 not in FP8_STORAGE:
        raise ValueError(f"fp8 needs a format ({', '.join(FP8_FORMATS)}), got {fp8!r}")
    return FP8_STORAGE[fp8]


def uniform_inputs(seed: int, shapes: dict[str, tuple[int, ...]], dtype: str,
                   fp8: str | None = None) -> dict[str, np.ndarray]:
    """Inputs uniform in [-1, 1], rounded to `dtype` (fp8: to the format `fp8`), returned as float32 arrays.

    Uniform [-1, 1] rather than zeros or ones: constant data lowers power draw and overstates throughput
    (CUTLASS profiler guidance). The values are already representable in `dtype`, so a backend's cast is exact.
    """
    rng = np.random.default_rng(seed)
    values = storage(dtype, fp8)
    out = {}
    for name, shape in shapes.items():
        x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
        out[name] = x.astype(values).astype(np.float32)
    return out
