"""Mixture-of-experts presets: parameter counts (total and active), the FLOP count against torch's FlopCounterMode,
the same step on torch and JAX, the grouped GEMM against the per-expert loop, and the routing record."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import yaml

from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.config.run_settings import apply_scale
from xmfu.harness.engine.declare import ConfigError
from xmfu.workloads.inference.spec import parse_specs as parse_inference
from xmfu.workloads.transformer import jax as jax_backend
from xmfu.workloads.transformer import torch as torch_backend
from xmfu.workloads.transformer.cases import TrainCase
from xmfu.workloads.transformer.routing import imbalance
from xmfu.workloads.transformer.spec import model_from_config

# (total, active non-embedding): Mixtral's paper states 46.7B and 12.9B active (embeddings included: 12.88B here)
PARAMS = {"moe-tiny": (181_056, 115_520), "moe-small": (308_841_216, 86_084_352),
          "mixtral-8x7b": (46_702_792_704, 12_748_853_248), "deepseek-v3": (672_149_632_000, 37_748_831_232)}


def preset(name: str):
    return model_from_config(yaml.safe_load((CONFIG_DIR / "model" / f"{name}.yaml").read_text()))


MOE_TINY = preset("moe-tiny")


@pytest.mark.parametrize("name", list(PARAMS))
def test_total_and_active_parameters(name):
    torch = pytest.importorskip("torch")
    from xmfu.workloads.transformer.torch_model import Transformer

    spec, (total, active) = preset(name), PARAMS[name]
    counts = spec.param_counts()
    assert (counts["total"], counts["active_non_embedding"]) == (total, active)
    with torch.device("meta"):  # shapes only
        model = Transformer(spec)
    assert sum(p.numel() for p in model.parameters()) == total
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    # the routed experts are the only parameters a token does not all use: top_k of n_experts
    assert total - counts["embedding"] - experts + experts * spec.top_k // spec.n_experts == active
    text = (CONFIG_DIR / "model" / f"{name}.yaml").read_text()
    assert f"{total:,}" in text and f"{active:,}" in text  # stated in the preset


def test_flops_count_active_parameters_as_the_flop_counter_does():
    """The fp64 model runs its experts as one matmul per expert (torch._grouped_mm has no fp64, and FlopCounterMode
    counts 0 for it in torch 2.13), so the counter sees every expert matmul a token's routing made."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from xmfu.workloads.transformer.torch_model import Transformer, load_weights

    case = TrainCase(MOE_TINY, "fp32")
    model = Transformer(MOE_TINY).double()
    load_weights(model, case.weights())
    model.double()
    tokens, targets = (torch.from_numpy(a) for a in case.batch_tokens())
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        model(tokens, targets)
    forward = counter.get_total_flops()
    spec, counts = MOE_TINY, MOE_TINY.param_counts()
    norms = sum(s[0] for s in spec.weight_shapes().values() if len(s) == 1)
    attention = 4 * spec.batch * spec.n_layers * spec.n_heads * spec.head_dim * spec.seq_len**2
    assert forward == 2 * case.tokens * (counts["active_non_embedding"] - norms) + attention
    assert case.flops() == 3 * forward + 6 * case.tokens * norms  # backward = 2 x forward; 6N counts the norms
    dense = TrainCase(dataclasses.replace(MOE_TINY, n_experts=0), "fp32")
    assert case.flops() != dense.flops()


def test_a_dense_presets_params_have_no_moe_fields():
    dense = TrainCase(preset("tiny"), "fp32").params()
    assert "n_experts" not in dense and "active_params" not in dense
    moe = TrainCase(MOE_TINY, "fp32").params()
    assert moe["n_experts"] == 4 and moe["active_params"] == 115_520 + 16_384


def test_imbalance_is_max_over_mean_tokens_per_expert():
    assert imbalance(np.array([[4, 4, 4, 4], [10, 2, 2, 2]])).tolist() == [1.0, 2.5]


def test_bad_moe_shapes_are_refused():
    with pytest.raises(ConfigError, match="top_k"):
        model_from_config({**dataclasses.asdict(MOE_TINY), "top_k": 5})
    with pytest.raises(ConfigError, match="dense_layers"):
        model_from_config({**dataclasses.asdict(MOE_TINY), "dense_layers": 2})


def test_smoke_scale_keeps_a_mixture_of_experts_one():
    model = yaml.safe_load((CONFIG_DIR / "model" / "mixtral-8x7b.yaml").read_text())
    scaled = apply_scale({"scale": "smoke", "workload": {"name": "transformer", "model": model}})
    assert scaled.data["workload"]["model"]["name"] == "moe-tiny"
    assert "mixtral-8x7b replaced by the moe-tiny" in scaled.notes["main"][0]


def test_inference_refuses_a_mixture_of_experts():
    with pytest.raises(ConfigError, match="mixture of experts"):
        parse_inference({"name": "inference", "model": dataclasses.asdict(MOE_TINY)}, "fp32", 0)


def _prepared(module, case, ctx):
    ok, why = module.available(case, ctx)
    assert ok, why
    return module.prepare(case, ctx)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", pytest.param("bf16", marks=pytest.mark.long)])  # 8 s each on 2 cores
def test_torch_and_jax_agree_with_the_fp64_model_and_each_other(dtype, cpu_ctx):
    case = TrainCase(MOE_TINY, dtype)
    torch_check = _prepared(torch_backend, case, cpu_ctx).result(None)
    jax_check = _prepared(jax_backend, case, cpu_ctx).result(None)
    assert case.check(torch_check).ok and case.check(jax_check).ok
    tol = 2e-6 if dtype == "fp32" else 2e-2  # as the dense model's parity test
    for key in ("loss", "grad_norm"):
        assert jax_check[key] == pytest.approx(torch_check[key], rel=tol), key


def test_grouped_mm_and_the_loop_agree():
    torch = pytest.importorskip("torch")
    from xmfu.workloads.transformer.torch_moe import grouped_matmul, grouped_mm_problem

    if grouped_mm_problem("cpu", torch.float32):
        pytest.skip(grouped_mm_problem("cpu", torch.float32))
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(40, 16, generator=gen), torch.randn(4, 8, 16, generator=gen)
    counts = [10, 0, 25, 5]  # an expert with no tokens
    offsets = torch.tensor(counts).cumsum(0).to(torch.int32)
    grouped = grouped_matmul(x, w, None, offsets)
    torch.testing.assert_close(grouped, grouped_matmul(x, w, counts, offsets))
    torch.testing.assert_close(grouped[10:35], x[10:35] @ w[2].t())


@pytest.mark.parametrize("module", [torch_backend, jax_backend], ids=["torch", "jax"])
def test_steps_learn_and_record_their_routing(module, cpu_ctx):
    case = TrainCase(MOE_TINY, "fp32", lr=3e-3)
    prepared = _prepared(module, case, cpu_ctx)
    losses = [float(prepared.fn()) for _ in range(3)]
    assert losses[-1] < losses[0] - 0.1, losses
    routing = prepared.recorded()["routing"]
    first_step = 1 if module is torch_backend else 0  # torch runs (and records) one untimed step in prepare
    assert len(routing["per_step"]) == 3 + first_step
    assert 1 <= routing["mean"] <= routing["worst_block"] <= MOE_TINY.n_experts / MOE_TINY.top_k
    assert "grouped GEMM" in prepared.notes["expert_gemm"] or "loop" in prepared.notes["expert_gemm"]


def test_torch_compile_says_why_it_skips_what_it_cannot_trace(cpu_ctx):
    torch = pytest.importorskip("torch")
    from xmfu.workloads.transformer import torch_compile
    from xmfu.workloads.transformer.torch_moe import compile_problem

    ok, why = torch_compile.available(TrainCase(MOE_TINY, "fp32"), cpu_ctx)
    assert ok == (compile_problem(torch.float32) is None and not why), why
    if not ok:
        assert "torch.compile" in why


@pytest.mark.long
def test_torch_compile_runs_the_moe_step_as_one_graph(cpu_ctx):
    """bf16: Dynamo traces the grouped GEMM (no graph break, no recompile per routing): one graph for the check's
    shape, one for the timed step's."""
    import torch

    from xmfu.workloads.transformer import torch_compile

    case = TrainCase(MOE_TINY, "bf16")
    if not hasattr(torch, "_grouped_mm"):  # torch 2.6: the per-expert loop would recompile per routing: refused
        ok, why = torch_compile.available(case, cpu_ctx)
        assert not ok and "_grouped_mm" in why, why
        return
    prepared = _prepared(torch_compile, case, cpu_ctx)
    assert case.check(prepared.result(None)).ok
    assert prepared.notes["compiles"] == 2 and "grouped_mm" in prepared.notes["expert_gemm"]


@pytest.mark.long  # 8 s on 2 cores (JAX's compile and the fp64 reference again): make test-slow; make test's budget
def test_a_moe_row_carries_active_params_flops_and_routing_through_the_engine(cli, tmp_path):
    pytest.importorskip("jax")
    from xmfu.workloads.transformer.jax import moe_version_problem

    done = cli("run", "workload=transformer", "model=moe-tiny", "backends=[jax]", "dtype=fp32", "timing=quick",
               "timing.max_time_s=0.3", "timing.warmup_s=0", f"results_dir={tmp_path}", "run_id=m")
    (row,) = [json.loads(line) for line in (tmp_path / "m" / "cases.jsonl").read_text().splitlines()]
    if moe_version_problem(TrainCase(MOE_TINY, "fp32")):  # jax 0.4 (the floor): refused with the reason
        assert row["status"] == "skipped" and "use jax 0.5 or later" in row["reason"], row
        return
    assert done.returncode in (0, 3), done.stderr
    assert row["status"] == "ok" and row["correctness"]["ok"]
    assert row["params"]["active_params"] == 115_520 + 16_384 and row["flops"] == TrainCase(MOE_TINY, "fp32").flops()
    routing = row["routing"]
    assert len(routing["per_step"]) >= row["time_s"]["n"] and routing["expert_gemm"].startswith("jax.lax.ragged_dot")
    assert cli("validate", str(tmp_path / "m")).returncode == 0


def test_strategies_say_what_runs_a_mixture_of_experts_across_devices(cpu_ctx):
    for strategy in ("ddp", "fsdp"):
        ok, why = torch_backend.available(TrainCase(MOE_TINY, "fp32", parallel=strategy, world_size=None), cpu_ctx)
        assert not ok and "runs across devices as ep" in why
    ok, why = torch_backend.available(TrainCase(preset("tiny"), "fp32", parallel="ep", world_size=None), cpu_ctx)
    assert not ok and "is dense" in why
    ok, why = jax_backend.available(TrainCase(MOE_TINY, "fp32", parallel="dp", world_size=None), cpu_ctx)
    assert not ok and "runs across devices as ep" in why  # JAX's ep: tests/workloads/test_transformer_jax_ep.py


@pytest.mark.slow
def test_expert_parallel_step_on_one_rank_checks_records_and_times_its_exchanges(cpu_ctx):
    """A world of one on gloo runs every part (the split, the exchanges, the gradient sync, the parity check
    against the single-device step, the exchanges alone); two ranks: tests/e2e/test_transformer_parallel_runs.py."""
    case = TrainCase(MOE_TINY, "fp32", parallel="ep", world_size=None, warmup=1, samples=2)
    assert torch_backend.available(case, cpu_ctx) == (True, "")
    prepared = torch_backend.prepare(case, cpu_ctx)
    check = case.check(prepared.result(None))
    assert check.ok and check.error < 1e-5, check
    assert prepared.case.world_size == 1 and prepared.notes["experts_per_rank"] == MOE_TINY.n_experts
    assert prepared.notes["comm"]["bytes_per_rank"] == 0  # one rank: nothing crosses a link
    assert 0 < float(prepared.fn()) < 10 and set(prepared.variants) == {"comm_alone"}
    prepared.variants["comm_alone"]()
    assert len(prepared.recorded()["routing"]["per_step"]) == 2  # the untimed first step and the one above


def test_jax_0_4_refuses_a_moe_model_and_runs_a_dense_one(monkeypatch):
    jax = pytest.importorskip("jax")
    from xmfu.workloads.transformer.jax import moe_version_problem

    monkeypatch.setattr(jax, "__version__", "0.4.38")
    assert "use jax 0.5 or later" in moe_version_problem(TrainCase(MOE_TINY, "fp32"))
    dense = TrainCase(preset("tiny"), "fp32")
    assert moe_version_problem(dense) is None
    monkeypatch.setattr(jax, "__version__", "0.5.0")
    assert moe_version_problem(TrainCase(MOE_TINY, "fp32")) is None
