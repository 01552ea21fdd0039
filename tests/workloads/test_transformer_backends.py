"""The same model on every backend: identical weights, matching step-0 loss and gradient norm, learning."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml

from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.machine.frameworks import JAX_PEAK_SOURCE
from xmfu.workloads.transformer import jax as jax_backend
from xmfu.workloads.transformer import torch as torch_backend
from xmfu.workloads.transformer import torch_compile, torch_triton
from xmfu.workloads.transformer.cases import TrainCase
from xmfu.workloads.transformer.reference import loss_and_grad_norm
from xmfu.workloads.transformer.spec import model_from_config

TINY = model_from_config(yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text()))
BACKENDS = {"torch": torch_backend, "jax": jax_backend, "torch_triton": torch_triton, "torch_compile": torch_compile}


def _prepared(name, case, ctx):
    module = BACKENDS[name]
    ok, why = module.available(case, ctx)
    assert ok, why
    return module.prepare(case, ctx)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_torch_and_jax_agree_at_step_zero(dtype, cpu_ctx):
    case = TrainCase(TINY, dtype)
    torch_check = _prepared("torch", case, cpu_ctx).result(None)
    jax_check = _prepared("jax", case, cpu_ctx).result(None)
    tol = 2e-6 if dtype == "fp32" else 2e-2  # bf16: both round matmul inputs, in different fusions
    for key in ("loss", "grad_norm"):
        assert jax_check[key] == pytest.approx(torch_check[key], rel=tol), key
    assert torch_check["loss"] == pytest.approx(math.log(TINY.vocab), rel=0.05)  # small init: near uniform


@pytest.mark.parametrize("name", ["torch", "jax", "torch_triton"])
def test_step_zero_matches_the_fp64_reference(name, cpu_ctx):
    case = TrainCase(TINY, "fp32")
    prepared = _prepared(name, case, cpu_ctx)
    result = prepared.result(None)
    check = case.check(result)
    assert check.ok, check
    if name == "jax":  # on a GPU or TPU the row says the peak cannot be reset between cases
        assert prepared.peak_memory_source == JAX_PEAK_SOURCE
    ref = loss_and_grad_norm(case, **case.check_rows())
    assert result["loss"] == pytest.approx(ref["loss"], rel=1e-5)


@pytest.mark.parametrize("name", [pytest.param("torch_triton", marks=pytest.mark.slow), "torch", "jax"])
def test_loss_goes_down_on_every_backend(name, cpu_ctx):
    """torch_compile's: test_torch_compile_learns_on_a_static_graph_compiled_before_timing."""
    case = TrainCase(TINY, "fp32", lr=3e-3)  # at 1e-2 AdamW's second step overshoots; at 3e-3 every step lowers it
    step = _prepared(name, case, cpu_ctx).fn
    losses = [float(step()) for _ in range(2)]  # the same batch every step: the model memorizes it
    assert losses[-1] < losses[0] - 0.1, losses  # measured: down by 0.25 (after a first step) or 0.43 (from start)


def test_a_torch_training_step_says_why_timing_cuda_graph_does_not_capture_it(cpu_ctx):
    """Its AdamW has capturable=False: torch refuses to capture step(), so the engine times it with events and the
    row says `cuda_graph: not applied: <this>` (tests/engine/test_runner.py) instead of failing the row."""
    prepared = _prepared("torch", TrainCase(TINY, "fp32"), cpu_ctx)
    assert "capturable=False" in prepared.no_cuda_graph and "events" in prepared.no_cuda_graph


@pytest.mark.parametrize("name", ["torch", "jax"])
def test_activation_checkpointing_keeps_the_numbers(name, cpu_ctx):
    plain = _prepared(name, TrainCase(TINY, "fp32"), cpu_ctx).result(None)
    remat = _prepared(name, TrainCase(TINY, "fp32", activation_checkpointing=True), cpu_ctx).result(None)
    assert remat["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    assert remat["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-5)


@pytest.mark.slow(seconds=70)  # Inductor compiles the training step: the suite's longest test, run once
def test_torch_compile_learns_on_a_static_graph_compiled_before_timing(cpu_ctx, inductor_quick_cpu_build):
    """The correctness pass runs a smaller shape: the timed step must not become a dynamic-shape recompile. And the
    loss goes down, as on every backend. One block and fp32, because each C++ kernel Inductor generates costs about
    2 s of g++ here: the tiny preset's two blocks in bf16 take 53 kernels and about 136 s of CPU, in fp32 45 kernels
    and 106 s, one block in fp32 33 kernels and 98 s. Autocast and depth are tested on the eager steps above. The
    build is conftest's inductor_quick_cpu_build: one g++ run per graph, scalar kernels."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # graphs cached by earlier tests in this process would be reused, not compiled
    prepared = _prepared("torch_compile", TrainCase(dataclasses.replace(TINY, n_layers=1), "fp32", lr=1e-2), cpu_ctx)
    assert prepared.notes["compile_dynamic"] is False and prepared.notes["compiles"] == 2
    assert prepared.notes["compile_s"] > 0 and prepared.notes["compile_s"] == prepared.notes["first_step_s"]
    before = counters["stats"]["unique_graphs"]
    losses = [float(prepared.fn()) for _ in range(4)]  # the same batch every step: the model memorizes it
    assert counters["stats"]["unique_graphs"] == before  # nothing compiled while it would be timed
    assert not [k for k in counters["aten_mm_info"] if "_s" in k]  # no symbolic (dynamic) matmul sizes
    assert losses[-1] < losses[0] - 0.1, losses


@pytest.mark.slow(seconds=40)
def test_torch_compile_compiles_every_case_of_a_batch_sweep(cpu_ctx, monkeypatch):
    """Dynamo keeps its graphs on the code objects every case's model shares: without a reset per case a batch sweep
    passes recompile_limit (8) and the later rows run eagerly under torch_compile's name (seen with the default
    limit: the tiny preset's 8th batch size compiled no graph). The limit is lowered to 2 so that two cases show it;
    Dynamo's "eager" backend keeps its capture and cache but skips Inductor's C++ build."""
    import torch
    import torch._dynamo

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: real_compile(model, backend="eager", **kw))
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"  # < 2.7
    torch._dynamo.reset()
    with torch._dynamo.config.patch({limit: 2}):
        for batch in (3, 4, 5):  # none of them the correctness pass's shape: each case compiles its timed step
            case = TrainCase(dataclasses.replace(TINY, n_layers=1, batch=batch), "fp32")
            assert _prepared("torch_compile", case, cpu_ctx).notes["compiles"] >= 1, batch
