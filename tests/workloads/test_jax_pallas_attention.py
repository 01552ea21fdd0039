"""The `jax_pallas` attention backend: jax's Pallas `mha` in interpret mode on this CPU (checked, not timed), and
what the ops cannot express (bottom-right causal at seq_q != seq_kv, Triton's block rules) skipped with reasons."""

from __future__ import annotations

import pytest

from xmfu.workloads.attention import jax_pallas
from xmfu.workloads.attention.spec import AttentionCase


def _case(seq_q, seq_kv, *, causal=False, alignment="top_left", mode="fwd", dtype="fp32", heads=2, kv_heads=2,
          head_dim=32):
    return AttentionCase(1, heads, kv_heads, seq_q, seq_kv, head_dim, causal, alignment, head_dim**-0.5, dtype, mode)


def _skip_where_mha_is_too_old():
    """jax 0.4.38's Pallas GPU mha has no BlockSizes (scripts/compat.sh floor): the backend refuses, with the reason."""
    why = jax_pallas.gpu_mha_too_old()
    if why:
        pytest.skip(f"this stack cannot run it: {why}")


def _check(case, ctx):
    if jax_pallas.gpu_mha_too_old():
        assert jax_pallas.available(case, ctx) == (False, jax_pallas.gpu_mha_too_old())
        _skip_where_mha_is_too_old()
    ok, why = jax_pallas.available(case, ctx)
    assert ok, why
    prepared = jax_pallas.prepare(case, ctx)
    prepared.fn()
    return case.check(prepared.result(case.check_rows())), prepared


@pytest.mark.parametrize("causal", [False, True])
def test_forward_at_odd_lengths_with_gqa(causal, cpu_ctx):
    # 24 x 40: off the powers of two; GQA 4 query heads on 2 kv heads (K/V repeated before the op).
    check, prepared = _check(_case(24, 40, causal=causal, heads=4, kv_heads=2, dtype="bf16"), cpu_ctx)
    assert check.ok, check
    assert "mha (interpret)" in prepared.notes["library"] and "repeated x2" in prepared.notes["gqa"]
    assert prepared.timing_valid is False and "interpret=True" in prepared.timing_note


def test_fwd_bwd_through_the_ops_vjp(cpu_ctx):
    check, prepared = _check(_case(24, 40, causal=True, mode="fwd_bwd", heads=2, kv_heads=1), cpu_ctx)
    assert check.ok, check
    assert "custom_vjp" in prepared.notes["backward"]
    assert prepared.notes["block_sizes"]["block_q_dq"] * 40 == prepared.notes["block_sizes"]["block_kv_dkv"] * 24


def test_bottom_right_runs_when_the_diagonals_coincide_and_is_skipped_otherwise(cpu_ctx):
    check, _ = _check(_case(24, 24, causal=True, alignment="bottom_right"), cpu_ctx)
    assert check.ok, check
    ok, why = jax_pallas.available(_case(24, 40, causal=True, alignment="bottom_right"), cpu_ctx)
    assert not ok and "top-left causal diagonal only" in why


def test_causal_with_more_queries_than_keys_is_skipped(cpu_ctx):
    ok, why = jax_pallas.available(_case(40, 24, causal=True), cpu_ctx)
    assert not ok and "past the keys" in why


def test_triton_block_rules():
    # jax's defaults where they fit: 128 forward, 32 backward, as many Q blocks as K/V blocks
    assert jax_pallas.mha_blocks(4096, 4096, "triton", True) == {
        "block_q": 128, "block_k": 128, "block_q_dkv": 32, "block_kv_dq": 32, "block_q_dq": 32, "block_kv_dkv": 32}
    assert jax_pallas.mha_blocks(512, 1024, "triton", True)["block_q_dq"] == 16
    assert "power-of-two" in jax_pallas.mha_blocks(40, 72, "triton", False)
    assert "as many Q blocks" in jax_pallas.mha_blocks(512, 4096 + 64, "triton", True)
    assert jax_pallas.mha_blocks(48, 80, "interpret", True)["block_kv_dkv"] == 80


def test_tpu_blocks_and_dtypes():
    assert jax_pallas.tpu_blocks(4096, 8192)["block_k_major"] == 128
    assert "divisible" in jax_pallas.tpu_blocks(128, 200)
    assert "fp16" in jax_pallas.case_unavailable(_case(128, 128, dtype="fp16"), "tpu")
    assert jax_pallas.case_unavailable(_case(128, 128, dtype="tf32"), "cpu")


def test_large_cases_are_checked_at_a_smaller_size():
    big = AttentionCase(4, 32, 8, 4096, 4096, 128, True, "top_left", 128**-0.5, "bf16", "fwd_bwd")
    small = jax_pallas.interpreter_case(big)
    assert (small.batch, small.heads, small.kv_heads, small.seq_q, small.seq_kv) == (1, 4, 1, 83, 97)
    _skip_where_mha_is_too_old()
    assert jax_pallas.case_unavailable(small, "cpu") is None


def test_catalog_lists_it():
    from xmfu.workloads.catalog import build_registry

    assert "jax_pallas" in build_registry().workload("attention").implementations
