"""The `jax_pallas` matmul backend: xmfu's Pallas GEMM, in Pallas' interpreter on this CPU (checked, not timed)."""

from __future__ import annotations

import pytest

from xmfu.workloads.matmul import jax_pallas
from xmfu.workloads.matmul.spec import MatmulCase


def _run(case, ctx):
    ok, why = jax_pallas.available(case, ctx)
    assert ok, why
    prepared = jax_pallas.prepare(case, ctx)
    prepared.fn()
    checked = prepared.check_case or case
    return checked.check(prepared.result(checked.check_rows())), prepared


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_odd_sizes_match_the_reference_in_the_interpreter(dtype, cpu_ctx):
    # 67x45x93: off every block multiple (the inputs are zero-padded) and more than one K step.
    check, prepared = _run(MatmulCase(67, 45, 93, dtype), cpu_ctx)
    assert check.ok, check
    assert prepared.notes["padded_to"] == "128x64x128" and prepared.notes["lowering"] == "interpret"


def test_transposed_storage(cpu_ctx):
    check, _ = _run(MatmulCase(40, 70, 130, "bf16", transpose_a=True, transpose_b=True), cpu_ctx)
    assert check.ok, check


def test_interpreter_rows_are_not_valid_timings_and_name_the_stack(cpu_ctx):
    import jax

    _, prepared = _run(MatmulCase(33, 33, 33, "fp32"), cpu_ctx)
    assert prepared.timing_valid is False and "interpret=True" in prepared.timing_note
    assert prepared.notes["jax"] == jax.__version__ and prepared.notes["jaxlib"]
    assert prepared.notes["blocks"] == "64x64x64" and prepared.notes["precision"].startswith("HIGHEST")


def test_large_cases_are_checked_at_a_smaller_size(cpu_ctx):
    case = MatmulCase(2048, 2048, 2048, "bf16")
    small = jax_pallas.interpreter_case(case)
    assert (small.m, small.n, small.k) == (200, 136, 152)
    assert jax_pallas.interpreter_case(MatmulCase(1024, 1024, 1024, "bf16")).m == 1024


@pytest.mark.parametrize("dtype", ["tf32", "fp8"])
def test_unoffered_dtypes_are_skipped_with_a_reason(dtype, cpu_ctx):
    ok, why = jax_pallas.available(MatmulCase(16, 16, 16, dtype), cpu_ctx)
    assert not ok and "Pallas GEMM" in why


def test_lowering_and_blocks_by_platform():
    assert [jax_pallas.lowering(k) for k in ("cuda", "rocm", "tpu", "cpu")] == ["triton", "triton", "mosaic",
                                                                                 "interpret"]
    assert jax_pallas.blocks("cuda", "fp32") == (64, 64, 32) and jax_pallas.blocks("tpu", "bf16") == (128, 128, 128)


def test_catalog_lists_it():
    from xmfu.workloads.catalog import build_registry

    assert "jax_pallas" in build_registry().workload("matmul").implementations
