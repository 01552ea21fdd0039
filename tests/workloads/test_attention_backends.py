"""Every attention backend on the CPU against one fp64 reference, on identical inputs.

Passing the same reference proves the semantics match across frameworks: causal alignment when
seq_q != seq_kv, the softmax scale, and the GQA grouping (query head h reads kv head h // group).
"""

from __future__ import annotations

import numpy as np
import pytest

from xmfu.harness.engine.case import Unavailable
from xmfu.workloads.attention import jax as jax_backend
from xmfu.workloads.attention import torch_eager, torch_sdpa, triton_fa2
from xmfu.workloads.attention import triton as triton_backend
from xmfu.workloads.attention.spec import AttentionCase

BACKENDS = {
    "torch_eager": (torch_eager.available, torch_eager.prepare),
    "torch_sdpa": (torch_sdpa.available, torch_sdpa.make_prepare("auto")),
    "torch_sdpa_flash": (torch_sdpa.available, torch_sdpa.make_prepare("flash")),
    "torch_sdpa_math": (torch_sdpa.available, torch_sdpa.make_prepare("math")),
    "triton": (triton_backend.available, triton_backend.prepare),
    "triton_fa2": (triton_fa2.available, triton_fa2.prepare),
    "jax": (jax_backend.make_available("xla"), jax_backend.make_prepare("xla")),
}
SHAPES = [  # (heads, kv_heads, seq_q, seq_kv, head_dim, causal, alignment): none a multiple of the tiles
    (4, 2, 19, 37, 64, True, "top_left"),  # GQA, more keys than queries
    (2, 2, 33, 21, 128, True, "top_left"),  # more queries than keys
    (4, 1, 23, 41, 64, True, "bottom_right"),  # MQA, FlashAttention's alignment
    (2, 2, 17, 17, 128, False, "top_left"),
]


def _case(shape, dtype="fp32", mode="fwd_bwd", scale=None):
    heads, kv, sq, skv, d, causal, alignment = shape
    return AttentionCase(1, heads, kv, sq, skv, d, causal, alignment, scale or d**-0.5, dtype, mode)


def cpu_flash_takes_gqa() -> bool:
    """Whether torch's CPU flash kernel runs grouped-query attention: torch 2.6's does not ("No available kernel",
    so the backend reports the case skipped), 2.11's and 2.13's do (scripts/compat.sh's profiles)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, kv = torch.zeros(1, 2, 4, 8), torch.zeros(1, 1, 4, 8)  # (B, H, S, D): two query heads share one kv head
    try:
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            torch.nn.functional.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except RuntimeError:
        return False
    return True


def _check(backend, case, ctx):
    available, prepare = BACKENDS[backend]
    ok, why = available(case, ctx)
    assert ok, why
    if backend == "torch_sdpa_flash" and case.kv_heads != case.heads and not cpu_flash_takes_gqa():
        with pytest.raises(Unavailable, match="SDPA flash kernel is not available for this case"):
            prepare(case, ctx)
        pytest.skip("this torch's CPU flash kernel has no GQA: the case is skipped with the reason (checked)")
    prepared = prepare(case, ctx)
    prepared.fn()
    return case.check(prepared.result(case.check_rows())), prepared


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"h{s[0]}kv{s[1]}-q{s[2]}-k{s[3]}-d{s[4]}-{s[6]}{s[5]}")
def test_outputs_and_gradients_match_the_reference(backend, shape, cpu_ctx):
    check, _ = _check(backend, _case(shape), cpu_ctx)
    assert check.ok, check


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_low_precision(backend, dtype, cpu_ctx):
    if backend == "jax" and dtype == "fp16":  # XLA's CPU backend has no fp16 dot with fp32 accumulation
        try:
            check, _ = _check(backend, _case(SHAPES[0], dtype=dtype), cpu_ctx)
        except Unavailable as exc:  # jaxlib 0.10 and 0.11 refuse it: skipped with the reason
            assert "XLA cannot compile" in str(exc)
            return
        assert check.ok, check  # jaxlib 0.4.38 compiles it (scripts/compat.sh floor)
        return
    check, _ = _check(backend, _case(SHAPES[0], dtype=dtype), cpu_ctx)
    assert check.ok, check


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_modes_and_a_non_default_scale(backend, mode, cpu_ctx):
    check, _ = _check(backend, _case(SHAPES[2], mode=mode, scale=0.3), cpu_ctx)
    assert check.ok, check


def test_the_check_can_fail_on_the_wrong_alignment(cpu_ctx):
    right = _case(SHAPES[0])
    wrong = AttentionCase(**{**right.__dict__, "alignment": "bottom_right"})
    _, prepared = _check("torch_eager", wrong, cpu_ctx)
    assert not right.check(prepared.result(None)).ok


def test_unavailable_sdpa_sub_backend_is_skipped_with_reason(cpu_ctx):
    with pytest.raises(Unavailable, match="efficient"):
        torch_sdpa.make_prepare("efficient")(_case(SHAPES[0]), cpu_ctx)
    ok, why = jax_backend.make_available("cudnn")(_case(SHAPES[0], dtype="bf16"), cpu_ctx)
    assert not ok and "NVIDIA" in why


def test_sdpa_records_the_kernel_it_used(cpu_ctx):
    _, prepared = _check("torch_sdpa", _case(SHAPES[3], mode="fwd"), cpu_ctx)
    assert prepared.notes["sdpa_backend_used"] in ("flash", "math")
    assert prepared.notes["sdpa_backend_requested"] == "auto"


def test_jax_layout_conversion_is_explicit_and_exact():
    x = np.arange(2 * 3 * 5 * 4).reshape(2, 3, 5, 4)  # (B, H, S, D)
    y = jax_backend.to_jax_layout(x)
    assert y.shape == (2, 5, 3, 4) and y[1, 4, 2, 3] == x[1, 2, 4, 3]
    np.testing.assert_array_equal(jax_backend.from_jax_layout(y), x)


def test_jax_records_xla_cost_beside_the_analytic_count(cpu_ctx):
    _, prepared = _check("jax", _case(SHAPES[3], mode="fwd"), cpu_ctx)
    assert "xla_cost_flops" in prepared.notes and prepared.notes["compile_s"] > 0


def test_triton_rejects_unsupported_head_dims(cpu_ctx):
    ok, why = triton_backend.available(_case((2, 2, 8, 8, 72, False, "top_left")), cpu_ctx)
    assert not ok and "72" in why and "80, 96" in why


@pytest.mark.parametrize("head_dim", [80, 96])
def test_triton_pads_head_dims_that_are_not_powers_of_two(head_dim, cpu_ctx):
    """FlashAttention-2's 80 and 96 (and 256): a 128-wide tile whose columns past the head dim are masked."""
    check, _ = _check("triton", _case((4, 2, 19, 37, head_dim, True, "bottom_right")), cpu_ctx)
    assert check.ok, check


def test_the_interpreter_checks_large_attention_at_a_small_size(cpu_ctx):
    from xmfu.harness.engine.attempts import prepare_and_check
    from xmfu.workloads.attention.spec import expand
    from xmfu.workloads.catalog import build_registry

    (case,) = expand({"name": "attention", "batch": 2, "heads": 8, "kv_heads": 2, "seq_q": [512], "seq_kv": [1024],
                      "head_dim": [64], "causal": [True], "alignment": "bottom_right", "mode": ["fwd_bwd"]},
                     "fp32", 0)
    attempt = prepare_and_check(case, cpu_ctx, build_registry().workload("attention"), "triton")
    assert attempt.status == "ok" and attempt.check["ok"], attempt.reason
    assert attempt.check["case_id"].endswith("b1-h4kv1-q97-k97-d64-causal-bottom_right")
    assert not attempt.prepared.timing_valid


def test_a_large_model_is_not_interpreted(cpu_ctx):
    import yaml

    from xmfu.harness.config.hydra_app import CONFIG_DIR
    from xmfu.workloads.transformer import torch_triton
    from xmfu.workloads.transformer.cases import TrainCase
    from xmfu.workloads.transformer.spec import model_from_config

    big = model_from_config(yaml.safe_load((CONFIG_DIR / "model" / "125m.yaml").read_text()))
    ok, why = torch_triton.available(TrainCase(big, "bf16"), cpu_ctx)
    assert not ok and "would take hours" in why and "model=tiny" in why


@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_triton_runs_a_one_token_forward_through_the_split_kv_decode_kernel(alignment, cpu_ctx):
    """seq_q 1: top-left causal sees key 0 only, bottom-right every key (a decode step); both checked."""
    check, prepared = _check("triton", _case((8, 2, 1, 45, 32, True, alignment), mode="fwd"), cpu_ctx)
    assert check.ok, check
    assert "flash_decoding" in prepared.notes["library"]
    _, tiled = _check("triton", _case((8, 2, 1, 45, 32, True, alignment), mode="fwd_bwd"), cpu_ctx)
    assert "flash_attention" in tiled.notes["library"]  # gradients: the tiled kernels
    # issue 41 item 5: the row says its backward spends 7 GEMMs per block pair where its FLOPs count 5
    assert tiled.notes["backward_gemms"].startswith("7 per") and "credits 5" in tiled.notes["backward_gemms"]
    assert "delta kernel" in tiled.notes["kernel"] and "split-KV" in prepared.notes["kernel"]


def test_triton_fa2_records_its_kernel_and_checks_large_cases_at_the_interpreters_size(cpu_ctx):
    """The published-structure kernel beside `triton`: the same interpreter case, its own library and structure."""
    from xmfu.harness.engine.attempts import prepare_and_check
    from xmfu.workloads.attention.spec import expand
    from xmfu.workloads.catalog import build_registry

    (case,) = expand({"name": "attention", "batch": 2, "heads": 4, "kv_heads": 2, "seq_q": [256], "seq_kv": [512],
                      "head_dim": [16], "causal": [True], "alignment": "bottom_right", "mode": ["fwd_bwd"]},
                     "fp32", 0)
    attempt = prepare_and_check(case, cpu_ctx, build_registry().workload("attention"), "triton_fa2")
    assert attempt.status == "ok" and attempt.check["ok"], attempt.reason
    assert attempt.check["case_id"].endswith("b1-h2kv1-q97-k97-d16-causal-bottom_right")
    notes = attempt.prepared.notes
    assert notes["library"] == "xmfu.kernels.flash_attention_fa2 (Triton)" and notes["interpreter"]
    assert notes["library_version"].startswith("triton ") and "5 GEMMs" in notes["kernel"]
    assert not attempt.prepared.timing_valid and "interpreter" in attempt.prepared.timing_note


def test_triton_fa2_runs_a_one_token_forward_in_its_own_tiled_kernel(cpu_ctx):
    check, prepared = _check("triton_fa2", _case((4, 2, 1, 45, 16, True, "bottom_right"), mode="fwd"), cpu_ctx)
    assert check.ok, check
    assert prepared.notes["library"].startswith("xmfu.kernels.flash_attention_fa2")


def test_triton_fa2_is_skipped_with_the_reason_where_triton_cannot_run(cpu_ctx, monkeypatch):
    import importlib.util
    from dataclasses import replace

    case = _case(SHAPES[0])
    ok, why = triton_fa2.available(_case((2, 2, 8, 8, 72, False, "top_left")), cpu_ctx)
    assert not ok and "72" in why
    ok, why = triton_fa2.available(case, replace(cpu_ctx, platform=replace(cpu_ctx.platform, kind="tpu")))
    assert not ok and why == "Triton does not target TPUs"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    ok, why = triton_fa2.available(case, cpu_ctx)
    assert not ok and "triton is not installed" in why
