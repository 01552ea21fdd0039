"""fp8 GEMMs on equal terms: every fp8 backend holds A row-major and B K-major for its timed calls (spec.FP8_LAYOUT)
and says so in the row; the JAX row names the GEMM XLA compiled and its operand types, so an upcast shows."""

from __future__ import annotations

import pytest
import torch

from tests.fakes.fake_gpu import fake_gpu
from tests.fakes.fake_scaled_mm import fake_scaled_mm
from tests.workloads.test_matmul_fp8 import H100, _ctx
from xmfu.harness.machine import compat
from xmfu.harness.machine.xla_gemm import Gemm, gemms
from xmfu.workloads.matmul import spec
from xmfu.workloads.matmul import torch as torch_backend

K_MAJOR_B = (1, 32)  # B used as (K, N) = (32, 48), held (N, K): strides (1, K)


@pytest.mark.parametrize(("transpose_a", "transpose_b"), [(False, False), (True, False), (False, True)])
def test_fp8_operands_are_held_in_one_layout_whatever_the_case_stores(transpose_a, transpose_b):
    case = spec.MatmulCase(64, 48, 32, "fp8", transpose_a, transpose_b, fp8_format="e4m3fn")
    ops = case.operands()
    assert ops.a.shape == (64, 32) and ops.b.shape == (48, 32) and (ops.transpose_a, ops.transpose_b) == (False, True)
    assert ops.a.flags.c_contiguous and ops.b.flags.c_contiguous
    stored_a, stored_b = case.stored_inputs()
    assert (ops.a == (stored_a.T if transpose_a else stored_a)).all()
    assert ((stored_b.T if transpose_b else stored_b) == ops.b.T).all()
    assert ops.fp8_layout.startswith(spec.FP8_LAYOUT)
    assert ("relaid out at set-up" in ops.fp8_layout) is (transpose_a or not transpose_b)
    bf16 = spec.MatmulCase(64, 48, 32, "bf16", transpose_a, transpose_b).operands()
    assert (bf16.transpose_a, bf16.transpose_b, bf16.fp8_layout) == (transpose_a, transpose_b, None)


def test_torch_triton_and_jax_time_fp8_on_the_same_layout(monkeypatch, cpu_ctx):
    """A case stored NN (B (K, N)): torch._scaled_mm (on a fake H100), both Triton kernels (the interpreter) and
    jnp.dot (XLA's CPU) all get A row-major and B K-major, and each row's fp8_layout says so in the same words."""
    from xmfu.kernels import matmul as plain
    from xmfu.kernels import matmul_persistent as persistent
    from xmfu.workloads.matmul import jax as jax_backend
    from xmfu.workloads.matmul import triton as triton_backend
    from xmfu.workloads.matmul import triton_persistent

    case = spec.MatmulCase(64, 48, 32, "fp8", fp8_format="e4m3fn")
    seen: dict[str, tuple] = {}

    def spy(name, fn):
        def call(a, b, *args, **kwargs):
            seen[name] = (tuple(a.stride()), tuple(b.stride()))
            return fn(a, b, *args, **kwargs)
        return call

    monkeypatch.setattr(torch, "_scaled_mm", spy("torch", fake_scaled_mm(H100)))
    with fake_gpu(0):
        torch_row = torch_backend.prepare(case, _ctx(H100))
        torch_row.fn()
    rows = {"torch": torch_row}
    interpreter_ok = not compat.triton_interpreter_too_old()
    if interpreter_ok:
        monkeypatch.setattr(plain, "matmul", spy("triton", plain.matmul))
        monkeypatch.setattr(persistent, "matmul", spy("triton_persistent", persistent.matmul))
        for name, module in (("triton", triton_backend), ("triton_persistent", triton_persistent)):
            rows[name] = module.prepare(case, cpu_ctx)
            rows[name].fn()
    held, to_jax = [], jax_backend.to_jax
    monkeypatch.setattr(jax_backend, "to_jax", lambda x, *a: held.append(x.shape) or to_jax(x, *a))
    rows["jax"] = jax_backend.prepare(case, cpu_ctx)
    for name, row in rows.items():
        assert case.check(row.result(None)).ok, name
        assert row.notes["fp8_layout"] == rows["torch"].notes["fp8_layout"], name
    assert rows["torch"].notes["fp8_layout"].startswith(spec.FP8_LAYOUT + "; the case stores A (M, K), B (K, N)")
    assert all(strides == ((32, 1), K_MAJOR_B) for strides in seen.values()), seen
    assert len(seen) == (3 if interpreter_ok else 1)
    assert held[:2] == [(64, 32), (48, 32)]  # A (M, K), B (N, K): the dot contracts both along their rows


# Optimized HLO as XLA prints it for a GPU (xla gemm_rewrite_test.cc's fp8 checks, in this HLO text's form): an fp8
# dot rewritten to cuBLASLt's fp8 matmul, and the same dot where XLA has no fp8 GEMM (converted to f16 first).
FP8_GEMM = """ENTRY %main.4 (a: f8e4m3fn[64,32], b: f8e4m3fn[48,32]) -> bf16[64,48] {
  %a = f8e4m3fn[64,32]{1,0} parameter(0)
  %b = f8e4m3fn[48,32]{1,0} parameter(1)
  %constant = f32[] constant(1)
  %cublas-lt-matmul.1 = (bf16[64,48]{1,0}, s8[33554432]{0}) custom-call(%a, %b, %constant, %constant), \
custom_call_target="__cublas$lt$matmul$f8", backend_config={"gemm_backend_config":{"alpha_real":1}}
  ROOT %get-tuple-element = bf16[64,48]{1,0} get-tuple-element(%cublas-lt-matmul.1), index=0
}
"""
UPCAST_GEMM = """%fused_convert (param_0: f8e4m3fn[64,32]) -> f16[64,32] {
  %param_0 = f8e4m3fn[64,32]{1,0} parameter(0)
  ROOT %convert.1 = f16[64,32]{1,0} convert(%param_0)
}

ENTRY %main.5 (a: f8e4m3fn[64,32], b: f8e4m3fn[48,32]) -> bf16[64,48] {
  %a = f8e4m3fn[64,32]{1,0} parameter(0)
  %b = f8e4m3fn[48,32]{1,0} parameter(1)
  %loop_convert_fusion = f16[64,32]{1,0} fusion(%a), kind=kLoop, calls=%fused_convert
  %loop_convert_fusion.1 = f16[48,32]{1,0} fusion(%b), kind=kLoop, calls=%fused_convert
  %cublas-gemm.1 = (bf16[64,48]{1,0}, s8[4194304]{0}) custom-call(%loop_convert_fusion, %loop_convert_fusion.1), \
custom_call_target="__cublas$gemm"
  ROOT %get-tuple-element = bf16[64,48]{1,0} get-tuple-element(%cublas-gemm.1), index=0
}
"""
TRITON_GEMM = """%gemm_fusion_dot.1_computation (parameter_0: bf16[64,32], parameter_1: bf16[48,32]) -> bf16[64,48] {
  %parameter_0 = bf16[64,32]{1,0} parameter(0)
  %parameter_1 = bf16[48,32]{1,0} parameter(1)
  ROOT %dot.1 = bf16[64,48]{1,0} dot(%parameter_0, %parameter_1), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}

ENTRY %main.3 (a: bf16[64,32], b: bf16[48,32]) -> bf16[64,48] {
  %a = bf16[64,32]{1,0} parameter(0)
  %b = bf16[48,32]{1,0} parameter(1)
  ROOT %gemm_fusion_dot.1 = bf16[64,48]{1,0} fusion(%a, %b), kind=kCustom, calls=%gemm_fusion_dot.1_computation, \
backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"64"}}}
}
"""
OLD_TEXT = """ENTRY %main.6 (Arg_0.1: f8e4m3fn[64,32], Arg_1.2: f8e4m3fn[48,32]) -> bf16[64,48] {
  %Arg_0.1 = f8e4m3fn[64,32]{1,0} parameter(0)
  %convert = f32[64,32]{1,0} convert(f8e4m3fn[64,32]{1,0} %Arg_0.1)
  %Arg_1.2 = f8e4m3fn[48,32]{1,0} parameter(1)
  %convert.6 = f32[48,32]{1,0} convert(f8e4m3fn[48,32]{1,0} %Arg_1.2)
  %dot.4 = f32[64,48]{1,0} dot(f32[64,32]{1,0} %convert, f32[48,32]{1,0} %convert.6), \
lhs_contracting_dims={1}, rhs_contracting_dims={1}
  ROOT %convert.5 = bf16[64,48]{1,0} convert(f32[64,48]{1,0} %dot.4)
}
"""


def test_the_xla_gemm_and_its_operand_types_are_read_from_the_hlo():
    from xmfu.workloads.matmul.jax import gemm_notes

    assert gemms(FP8_GEMM) == [Gemm("__cublas$lt$matmul$f8", ("f8e4m3fn", "f8e4m3fn"))]
    notes = gemm_notes(gemms(FP8_GEMM), "fp8")
    assert notes["fp8_gemm"] == "fp8 operands reach the GEMM" and "cuBLASLt/hipBLASLt fp8 matmul" in notes["xla_gemm"]
    assert gemms(UPCAST_GEMM) == [Gemm("__cublas$gemm", ("f16", "f16"))]
    assert gemm_notes(gemms(UPCAST_GEMM), "fp8")["fp8_gemm"].startswith("upcast: XLA converts the fp8 operands to f16")
    assert gemms(TRITON_GEMM) == [Gemm("dot in __triton_gemm", ("bf16", "bf16"))]
    assert gemms(OLD_TEXT) == [Gemm("dot", ("f32", "f32"))]  # jax 0.4.38 prints operand shapes inline
    assert gemm_notes(None, "fp8") == {"xla_gemm": "not read (this backend gives no HLO text)"}


def test_the_jax_row_shows_xlas_cpu_upcast_of_fp8(cpu_ctx):
    from xmfu.workloads.matmul import jax as jax_backend

    (case,) = spec.for_device([spec.MatmulCase(64, 48, 32, "fp8")], cpu_ctx.device)
    notes = jax_backend.prepare(case, cpu_ctx).notes
    assert notes["fp8_gemm"] == "upcast: XLA converts the fp8 operands to f32 before the GEMM", notes
    assert notes["xla_gemm"].startswith("dot") and notes["xla_gemm"].endswith("on f32 x f32")
