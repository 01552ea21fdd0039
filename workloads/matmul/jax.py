"""jnp.dot under jax.jit: XLA's GEMM (cuBLAS/hipBLASLt on GPUs, the MXU on TPUs, Eigen/oneDNN on a CPU)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import jax_rows, local_jax_device, to_jax, xla_cost_flops
from xmfu.harness.machine.jax_distributed import jax_unavailable
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.xla_gemm import Gemm, compiled_gemms
from xmfu.workloads.matmul.spec import MatmulCase, Operands, fp8_gemm_refused


def available(case: MatmulCase, ctx: RunContext) -> tuple[bool, str]:
    why = jax_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if case.dtype == "tf32" and ctx.platform.kind not in ("cuda", "rocm"):
        return False, f"tf32 needs GPU tensor cores; a {ctx.platform.kind} device has none"
    if case.dtype == "fp8":
        why = fp8_unavailable(case, ctx.platform.kind, ctx.device)
        if why:
            return False, why
    if case.dtype == "fp16" and ctx.platform.kind == "tpu":
        return False, "TPUs have no fp16 matrix unit; use bf16"
    return True, ""


# Where XLA runs an fp8 x fp8 dot as an fp8 GEMM: its ROCm capability has `has_nanoo_fp8_support()` (the fnuz types)
# on gfx942 (MI300) and `has_ocp_fp8_support()` on gfx950 (MI350) and gfx12 (xla/stream_executor/rocm/
# rocm_compute_capability.h); on NVIDIA its GPU dot tests keep f8 operands in cuBLASLt only when
# `cuda_cc.IsAtLeastHopper()` and convert them to f16 otherwise. An fp8 case elsewhere would time an f16 GEMM.
FP8_AMD_ARCHES = ("gfx942", "gfx950")


def fp8_unavailable(case: MatmulCase, kind: str, device: DeviceInfo) -> str | None:
    """Why jnp.dot cannot run this fp8 case as an fp8 GEMM on `device`, or None (a CPU checks it, upcast). XLA: fp8
    GEMMs through cuBLASLt from Hopper, on AMD gfx942 (fnuz) and gfx950 (OCP) (rocm_compute_capability.h)."""
    if kind == "tpu":
        return "fp8 matmul through JAX is not offered on TPUs by xmfu (not verified on any TPU generation)"
    return fp8_gemm_refused(case, kind, device, engine="XLA", min_cc=(9, 0), amd_arches=FP8_AMD_ARCHES)


def _dot(case: MatmulCase, ops: Operands):
    import jax
    import jax.numpy as jnp

    # fp32 pinned to full precision (JAX's default on GPU is TF32 and on TPU bf16 passes); tf32 asked for
    # explicitly; bf16/fp16 accumulate in fp32 and round the result to the input dtype, like torch.matmul.
    out_dtype = {"bf16": jnp.bfloat16, "fp16": jnp.float16, "fp8": jnp.bfloat16}.get(case.dtype, jnp.float32)
    if case.dtype == "fp8":
        # fp32 accumulation, bf16 output, as torch._scaled_mm's. HIGHEST, not DEFAULT: XLA enables cuBLASLt's fp8
        # fast accumulation only when both operands' precision is DEFAULT (openxla/xla PR #6599), and torch's
        # default (use_fast_accum=False) does not use it either.
        kwargs = {"precision": jax.lax.Precision.HIGHEST, "preferred_element_type": jnp.float32}
    elif case.dtype == "fp32":
        kwargs = {"precision": jax.lax.Precision.HIGHEST}
    elif case.dtype == "tf32":
        kwargs = {"precision": jax.lax.DotAlgorithmPreset.TF32_TF32_F32}
    else:
        kwargs = {"preferred_element_type": jnp.float32}

    def dot(a, b):
        a, b = ops.used(a, b)  # a transpose folds into the dot's dimension numbers (no copy in the program)
        return jnp.dot(a, b, **kwargs).astype(out_dtype)

    return dot, str(kwargs)


def prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    import jax

    device = local_jax_device(ctx.config.device_index)  # this process's (jax.devices() spans all processes)
    ops = case.operands()  # fp8: spec.FP8_LAYOUT, B K-major as for every fp8 backend
    copies = ctx.input_copies(case.input_bytes())
    a0, b0 = (to_jax(x, case.dtype, device, case.fp8_format) for x in (ops.a, ops.b))
    pairs = [[a0, b0]] + [[a0.copy(), b0.copy()] for _ in range(copies - 1)]
    dot, precision = _dot(case, ops)
    start = time.perf_counter()
    compiled = jax.jit(dot).lower(a0, b0).compile()
    compile_s = time.perf_counter() - start
    calls = [(lambda pair=pair: compiled(*pair)) for pair in pairs]

    def result(rows: np.ndarray | None) -> np.ndarray:
        return jax_rows(compiled(a0, b0), rows)

    def fresh_inputs(new: MatmulCase) -> None:  # timing.fresh_inputs: new arrays in the first pair's places
        fresh = new.operands()  # in the layout the compiled dot takes (spec.FP8_LAYOUT for fp8)
        pairs[0][:] = [to_jax(x, case.dtype, device, case.fp8_format) for x in (fresh.a, fresh.b)]
        jax.block_until_ready(pairs[0])  # in place before the timed call (its timer is perf_counter)

    notes = {"library": "jnp.dot (XLA)", "precision": precision, "compile_s": compile_s,
             "xla_cost_flops": xla_cost_flops(compiled),
             "jax_device": str(device), "jax_device_kind": device.device_kind, "input_copies": len(calls),
             **gemm_notes(compiled_gemms(compiled), case.dtype)}
    if case.dtype == "fp8":
        notes.update(fp8_format=case.fp8_format, fp8_layout=ops.fp8_layout)
    return Prepared(rotate(calls), result, "jax", notes=notes, fresh_inputs=fresh_inputs, output=jax_rows)


def gemm_notes(found: list[Gemm] | None, dtype: str) -> dict[str, Any]:
    """The row's record of the GEMM XLA compiled (harness/machine/xla_gemm.py): its call target or emitter and its
    operand types; for fp8, whether the operands reach it as fp8 or widened (an upcast: an f16/bf16/f32 GEMM timed
    under the fp8 name)."""
    if found is None:
        return {"xla_gemm": "not read (this backend gives no HLO text)"}
    if not found:
        return {"xla_gemm": "none found in the compiled HLO"}
    notes: dict[str, Any] = {"xla_gemm": "; ".join(str(g) for g in found)}
    if dtype == "fp8":
        widened = sorted({t for g in found for t in g.operand_types if not t.startswith("f8")})
        notes["fp8_gemm"] = (f"upcast: XLA converts the fp8 operands to {'/'.join(widened)} before the GEMM"
                             if widened else "fp8 operands reach the GEMM")
    return notes
