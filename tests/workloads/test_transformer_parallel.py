"""Distributed training-step cases and formulas against hand computations: the sweep, batch and FLOPs per device,
bytes each rank sends per strategy, scaling efficiency, overlap, the parity check and the HLO collectives."""

from __future__ import annotations

import pytest
import yaml

from xmfu.harness.cli.formulas import restate_rows
from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.results.rederive.row_checks import restated_problems
from xmfu.workloads.transformer import figures, jax_comm, parallel, parity
from xmfu.workloads.transformer.cases import TrainCase, expand

TINY_CONFIG = yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text())
P = 131_392  # tiny's parameters (tests/workloads/test_transformer_spec.py)
ROOT = 256 * 64 + 64 + 256 * 64  # embedding, final norm, output layer


def _cases(**workload):
    return expand({"name": "transformer", "model": TINY_CONFIG, **workload}, "fp32", 0)


def test_every_strategy_follows_its_single_device_baseline():
    cases = _cases(parallel=["fsdp", "ddp"], batch=[1, 2], scaling=["weak", "strong"])
    ids = [c.case_id for c in cases]
    assert ids[:5] == ["transformer-fp32-tiny-b1-s32", "transformer-fp32-tiny-b1-s32-fsdp-weak",
                       "transformer-fp32-tiny-b1-s32-fsdp-strong", "transformer-fp32-tiny-b1-s32-ddp-weak",
                       "transformer-fp32-tiny-b1-s32-ddp-strong"]
    assert len(cases) == 10 and all(c.world_size is None for c in cases if c.distributed)
    assert [c.case_id for c in _cases()] == ["transformer-fp32-tiny-b2-s32"]  # default: one device only
    assert "parallel" not in _cases()[0].params()  # the single-device step keeps its earlier comparability key
    with pytest.raises(ConfigError, match=r"workload\.parallel"):
        _cases(parallel="tp")


def test_weak_and_strong_scaling_batches_flops_and_tokens():
    weak = _cases(parallel="ddp")[1].on_devices(4)
    assert (weak.global_batch, weak.per_device_batch, weak.tokens) == (8, 2, 8 * 32)
    single = _cases()[0]
    assert weak.global_flops() == 4 * single.flops() and weak.flops() == single.flops()  # per device
    assert weak.work_units() == {"tokens": 8 * 32.0}
    assert weak.params()["world_size"] == 4 and weak.params()["global_batch"] == 8
    strong = _cases(parallel="fsdp", scaling="strong")[1].on_devices(2)
    assert (strong.global_batch, strong.per_device_batch) == (2, 1) and strong.flops() == single.flops() / 2
    assert strong.batch_tokens()[0].shape == (2, 32) and weak.batch_tokens()[0].shape == (8, 32)
    assert (weak.batch_tokens()[0][:2] == single.batch_tokens()[0]).all()  # device 0's batch is the baseline's
    assert "does not split" in _cases(parallel="fsdp", scaling="strong")[1].on_devices(4).split_problem()
    assert weak.check_rows() == {"batch": 4, "tokens": 32}


def test_ddp_sends_twice_the_gradients_times_n_minus_one_over_n():
    model = _cases()[0].model
    for n in (2, 4, 8):
        got = parallel.bytes_per_rank(parallel.nominal_collectives("ddp", "torch", model, "fp32", n), n)
        assert got == pytest.approx(2 * (n - 1) / n * 4 * P)
    assert parallel.bytes_per_rank(parallel.ddp_collectives(model), 1) == 0  # one rank: no link


def test_fsdp_gathers_forward_and_backward_and_reduce_scatters():
    model = _cases()[0].model
    fp32 = parallel.fsdp_collectives(model, "fp32", 2)
    assert [c.op for c in fp32].count("all_gather") == 3 + 2  # root + 2 blocks forward; blocks only backward
    assert parallel.bytes_per_rank(fp32, 2) == pytest.approx(0.5 * (4 * P + 4 * (P - ROOT) + 4 * P))
    bf16 = parallel.fsdp_collectives(model, "bf16", 2)  # all-gathered in param_dtype, reduced in fp32
    assert parallel.bytes_per_rank(bf16, 2) == pytest.approx(0.5 * (2 * P + 2 * (P - ROOT) + 4 * P))
    # dim 0 padded to a multiple of n (FSDP2): the 32-row wk/wv of a block become 33 rows at n = 3
    root, block = parallel.fsdp_collectives(model, "fp32", 3)[:2]  # forward order: the root, then block 0
    assert root.size_bytes == 4 * (2 * 258 * 64 + 66)
    assert block.size_bytes == 4 * (2 * 66 * 64 + 2 * 33 * 64 + 2 * 66 + 2 * 192 * 64 + 66 * 192)
    jax_nominal = parallel.nominal_collectives("fsdp", "jax", model, "fp32", 4)  # unpadded, root re-gathered
    assert parallel.bytes_per_rank(jax_nominal, 4) == pytest.approx(0.75 * 3 * 4 * P)


def test_scaling_efficiency_and_overlap():
    assert parallel.scaling_efficiency(0.9, 1.0) == pytest.approx(0.9)
    assert parallel.overlap(0.25, 1.0) == (0.75, None)
    value, note = parallel.overlap(-0.1, 1.0)
    assert value == 1.0 and "clamped from 1.1" in note
    value, note = parallel.overlap(2.0, 1.0)
    assert value == 0.0 and "clamped from -1" in note
    assert parallel.overlap(0.1, 0.0)[0] is None


def _row(case_id, parallel_name, median, tflops, n=2, **extra):
    params = {"parallel": parallel_name, "scaling": "weak", "world_size": n} if parallel_name else {}
    return {"case_id": case_id, "backend": "torch", "status": "ok", "timing_valid": True, "tflops": tflops,
            "flops": 1e9, "mfu": tflops / 10, "time_s": {"median": median}, "params": params, **extra}


def test_derived_figures_of_a_distributed_row():
    base = _row("t-b2", None, 1.0, 2.0)
    notes = {"comm": {"bytes_per_rank": 4e9, "formula": "f"}, "per_rank_peak_memory_bytes": [1, 2],
             "comm_alone_collectives": {"source": "buckets"}}
    row = _row("t-b2-ddp-weak", "ddp", 1.25, 1.6, notes=notes,
               variants={"no_comm": {"time_s": {"median": 1.0}}, "comm_alone": {"time_s": {"median": 0.5}}})
    out = figures.derive(row, [base])
    assert out["scaling_efficiency"] == pytest.approx(0.8) and out["scaling_baseline"]["case_id"] == "t-b2"
    assert out["comm_exposed_s"] == pytest.approx(0.25) and out["comm_total_s"] == 0.5
    assert out["overlap"] == pytest.approx(0.5) and out["comm_achieved_gbps"] == pytest.approx(8.0)
    assert out["comm"]["exposed_method"].endswith("DDP.no_sync() (no gradient all-reduce)")
    assert out["flops_global"] == 2e9 and out["peak_memory_per_rank_bytes"] == [1, 2]
    lonely = figures.derive(row, [])
    assert lonely["scaling_efficiency"] is None and "no timed single-device row" in lonely["scaling_note"]
    fast = dict(row, time_s={"median": 0.9})  # faster with collectives than without: noise, clamped and said
    assert figures.derive(fast, [base])["overlap"] == 1.0 and figures.derive(fast, [base])["comm"]["clamped"]
    missing = dict(row, variants={"comm_alone": {"time_s": {"median": 0.5}}}, notes={**notes, "no_comm": "OOM"})
    got = figures.derive(missing, [base])
    assert got["comm_exposed_s"] is None and got["overlap"] is None and "OOM" in got["comm"]["exposed_method"]
    one = figures.derive(_row("t-b2-ddp-weak", "ddp", 1.0, 2.0, n=1, notes=notes, variants=row["variants"]), [base])
    assert one["overlap"] is None and "one device" in one["comm"]["note"]
    assert figures.derive(base, []) == {}


def test_a_scaling_efficiency_above_one_is_flagged_not_credible():
    """The issue's FSDP row: 16.7 under Hydra's submitit_local, reported unflagged."""
    base = _row("t-b2", None, 1.0, 0.1)
    fsdp = figures.derive(_row("t-b2-fsdp-weak", "fsdp", 0.06, 1.67, notes={}), [base])
    assert fsdp["scaling_efficiency"] == pytest.approx(16.7) and fsdp["scaling_credible"] is False
    assert fsdp["scaling_note"].startswith("not credible: scaling efficiency 16.7 > 1")
    fair = figures.derive(_row("t-b2-fsdp-weak", "fsdp", 1.25, 0.08, notes={}), [base])
    assert fair["scaling_credible"] is True and "scaling_note" not in fair


def test_parity_passes_noise_and_catches_unsynchronised_gradients():
    good = {"loss": 5.5, "ref_loss": 5.5 * (1 + 5e-8), "grad_norm": 2.0, "ref_grad_norm": 2.0, "update_error": 8e-6,
            "sequences": 2, "tokens": 32, "devices": 2}
    assert parity.check_parity("fp32", good).ok
    unsynced = {**good, "grad_norm": 2.0 * 1.4, "update_error": 0.98}  # measured: 0.40 and 0.98
    for dtype in ("fp32", "bf16"):
        check = TrainCase(_cases()[0].model, dtype, parallel="ddp").check(unsynced)
        assert not check.ok and "single-device step" in check.metric
    assert parity.check_parity("bf16", {**good, "update_error": 0.15}).ok  # FSDP2 bf16 vs autocast: measured 0.147


HLO = """
ENTRY %main {
  %all-reduce.22 = (f32[32,64]{1,0}, /*index=1*/f32[64]{0}) all-reduce(f32[32,64]{1,0} %a, f32[64]{0} %b), to_apply=%add
  %all-gather-start = (bf16[16,64]{1,0}, bf16[64,64]{1,0}) all-gather-start(bf16[16,64]{1,0} %p), dimensions={0}
  %reduce-scatter.1 = f32[16,64]{1,0} reduce-scatter(f32[64,64]{1,0} %g), dimensions={0}
  %rs-start = ((f32[64,64]{1,0}), f32[16,64]{1,0}) async-start(f32[64,64]{1,0} %g), calls=%wrapped
  ROOT %all-to-all = s32[8]{0} all-to-all(s32[8]{0} %t), dimensions={0}
}
"""


def test_collectives_are_read_from_optimised_hlo_with_nccl_tests_sizes():
    found = jax_comm.hlo_collectives(HLO, 4)
    assert [(c.op, c.size_bytes, c.dtype) for c in found] == [
        ("all_reduce", (32 * 64 + 64) * 4, "fp32"), ("all_gather", 64 * 64 * 2, "bf16"),
        ("reduce_scatter", 4 * 16 * 64 * 4, "fp32"), ("all_to_all", 32, "fp32")]
    assert jax_comm.summary(found)["counts"] == {"all_reduce": 1, "all_gather": 1, "reduce_scatter": 1,
                                                 "all_to_all": 1}


def test_parity_reference_that_does_not_fit_runs_on_this_process_cpu(monkeypatch):
    """jax.devices("cpu") lists every process's CPU devices after jax.distributed (jax/_src/xla_bridge.py
    make_cpu_client passes num_nodes and node_id): process 0's comes first, unreachable from process 1."""
    import types

    import jax

    from xmfu.workloads.transformer import jax_parity

    gpu = types.SimpleNamespace(platform="gpu")
    other, mine = (types.SimpleNamespace(platform="cpu", process_index=i) for i in (0, 1))
    used = []

    def step(run, device, step, tx):
        if device is gpu:
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory")
        used.append(device)
        return {"loss": 1.0, "grad_norm": 1.0, "params": {}}

    monkeypatch.setattr(jax_parity, "local_jax_device", lambda: gpu)
    monkeypatch.setattr(jax_parity, "_single_device_step", step)
    monkeypatch.setattr(jax, "devices", lambda backend=None: [other, mine] if backend == "cpu" else [gpu])
    monkeypatch.setattr(jax, "local_devices", lambda process_index=None, backend=None:
                        [mine] if backend == "cpu" else [gpu])
    ref = jax_parity.single_device_reference(None, None, None)
    assert used == [mine] and ref["device"] == "cpu (does not fit one device)"


ASYNC_HLO = """
ENTRY %main {
  %reduce-scatter-start = ((f32[64,64]{1,0}), f32[16,64]{1,0}) reduce-scatter-start(f32[64,64]{1,0} %g), dimensions={0}
  %reduce-scatter-done = f32[16,64]{1,0} reduce-scatter-done(((f32[64,64]{1,0}), f32[16,64]{1,0}) %reduce-scatter-start)
  %all-to-all-start = ((bf16[8,4]{1,0}), bf16[8,4]{1,0}, u32[], u32[]) all-to-all-start(bf16[8,4]{1,0} %t)
  %all-gather-start.1 = ((f32[4]{0}, f32[8]{0}), (f32[16]{0}, f32[32]{0})) all-gather-start(f32[4]{0} %a, f32[8]{0} %b)
  %all-reduce-start = (f32[32]{0}, f32[8]{0}) all-reduce-start(f32[32]{0} %c, f32[8]{0} %d), to_apply=%add
  ROOT %all-reduce-done = (f32[32]{0}, f32[8]{0}) all-reduce-done((f32[32]{0}, f32[8]{0}) %all-reduce-start)
}
"""


FSDP_HLO = """
ENTRY %main {
  %all-gather.1 = f32[256,64]{1,0} all-gather(f32[64,64]{1,0} %e), dimensions={0}
  %all-gather.2 = f32[64,64]{1,0} all-gather(f32[16,64]{1,0} %w), dimensions={0}
  %all-reduce.3 = (f32[256,64]{1,0}, f32[64,64]{1,0}) all-reduce(f32[256,64]{1,0} %g, f32[64,64]{1,0} %h), to_apply=%add
}
"""


def test_jax_rows_state_the_collectives_xla_compiled_and_the_textbook_schedule_beside():
    # XLA compiled the fsdp step as gathers plus one gradient all-reduce, not ZeRO-3's gathers and reduce-scatters:
    # the row's figure is the compiled program's (issue 25, item 20).
    run = _cases(parallel="fsdp")[1].on_devices(4)
    found = jax_comm.hlo_collectives(FSDP_HLO, 4)
    comm = parallel.compiled(found, run)
    want = 0.75 * (256 * 64 + 64 * 64) * 4 + 1.5 * (256 * 64 + 64 * 64) * 4
    assert comm["bytes_per_rank"] == pytest.approx(want) and comm["collectives_per_step"] == 3
    assert comm["textbook"] == parallel.nominal(run, "jax") and comm["textbook"]["bytes_per_rank"] != want
    row = {**_row("t-b2-fsdp-weak", "fsdp", 1.25, 1.6, n=4, notes={"comm": comm}), "backend": "jax",
           "variants": {"comm_alone": {"time_s": {"median": 0.5}}}}
    out = figures.derive(row, [])
    assert out["comm_bytes_per_rank"] == pytest.approx(want) and "compiled step" in out["comm_bytes_formula"]
    assert out["comm_achieved_gbps"] == pytest.approx(want / 0.5 / 1e9)
    assert out["comm"]["textbook_bytes_per_rank"] == comm["textbook"]["bytes_per_rank"]
    assert "ZeRO-3" in out["comm"]["textbook_formula"]


def test_async_collectives_as_the_gpu_hlo_printer_writes_them_count_their_results():
    """XLA's default HloPrintOptions (syntax_sugar_async_ops) print an async-wrapped reduce-scatter or all-to-all
    as `<op>-start` with the async shape ((operands), results[, context]) and omit the wrapped computation."""
    found = jax_comm.hlo_collectives(ASYNC_HLO, 4)
    assert [(c.op, c.size_bytes, c.dtype) for c in found] == [
        ("reduce_scatter", 4 * 16 * 64 * 4, "fp32"), ("all_to_all", 8 * 4 * 2, "bf16"),
        ("all_gather", (16 + 32) * 4, "fp32"), ("all_reduce", (32 + 8) * 4, "fp32")]


def test_step_memory_is_xlas_buffer_assignment_for_one_device():
    import jax
    import jax.numpy as jnp

    from xmfu.workloads.transformer.jax_parallel import step_memory

    compiled = jax.jit(lambda x: (x @ x).sum()).lower(jnp.ones((64, 64), jnp.float32)).compile()
    found = step_memory(compiled)
    assert found["argument_bytes"] == 64 * 64 * 4 and found["output_bytes"] == 4
    assert set(found) <= {"argument_bytes", "output_bytes", "temp_bytes", "alias_bytes", "peak_bytes"}

    class Unsupported:
        def memory_analysis(self):
            raise NotImplementedError

    assert step_memory(Unsupported()) is None


def test_comm_bytes_x10_are_refused_by_the_strategys_formula():
    """A distributed step's comm_bytes_per_rank against parallel.nominal (the formula its backends record)."""
    model = yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text())
    workload = {"name": "transformer", "model": model, "parallel": "ddp", "scaling": "weak"}
    case = expand(workload, "fp32", 0)[1]
    case = case.on_devices(2)
    bytes_per_rank = parallel.nominal(case, "torch")["bytes_per_rank"]
    row = {"workload": "transformer", "backend": "torch", "status": "ok", "case_id": case.case_id, "phase": "main",
           "params": case.params(), "flops": case.flops(), "flop_convention": case.flop_convention, "bytes": 0.0,
           "time_s": {"median": 0.5}, "notes": {}, "comm_bytes_per_rank": bytes_per_rank * 10,
           "flops_global": case.flops() * 2}
    config = yaml.safe_dump({"workload": workload, "backends": ["torch"], "dtype": "fp32"})
    (restated,) = restate_rows(config, [], [row])
    problems = restated_problems(row, restated, "cases.jsonl line 1")
    assert any("comm_bytes_per_rank" in p and "formula" in p for p in problems), problems
    row["comm_bytes_per_rank"] = bytes_per_rank
    assert restated_problems(row, restate_rows(config, [], [row])[0], "x") == []
