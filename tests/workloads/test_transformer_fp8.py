"""fp8 training of the transformer step (workloads/transformer/fp8.py, jax_fp8.py, torch_fp8.py) and the MFU of a row
whose FLOPs run in several formats (schema/formats.py, engine/metrics.py, rederive/formats.py)."""

from __future__ import annotations

import dataclasses
import importlib.util

import msgspec
import numpy as np
import pytest
import yaml

from tests.conftest import gpu_device
from tests.engine.test_runner import FAKE, FakeCase, _prepared, _runner, always
from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.metrics import format_utilization
from xmfu.harness.engine.registry import Implementation, WorkloadDef
from xmfu.harness.engine.runner import Phase
from xmfu.harness.machine.peaks import Peak, lookup
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.rederive.formats import format_problems
from xmfu.harness.results.rederive.times import Settings
from xmfu.harness.results.schema import formats
from xmfu.harness.results.schema.formats import FormatMfu
from xmfu.harness.suites import verdict
from xmfu.workloads.transformer import fp8
from xmfu.workloads.transformer.cases import TrainCase, expand
from xmfu.workloads.transformer.spec import model_from_config


def preset(name: str):
    return model_from_config(yaml.safe_load((CONFIG_DIR / "model" / f"{name}.yaml").read_text()))


TINY, MOE_TINY = preset("tiny"), preset("moe-tiny")


def test_fp8_layers_are_the_attention_and_dense_or_shared_mlp_linears():
    shapes = MOE_TINY.weight_shapes()
    chosen = sorted(n for n, s in shapes.items() if fp8.fp8_weight(n, s))
    assert all(".attention.w" in n or ".shared.w" in n for n in chosen) and len(chosen) == 2 * (4 + 3)
    assert not any(fp8.fp8_weight(n, shapes[n]) for n in ("output.weight", "layers.0.feed_forward.router.weight",
                                                         "layers.0.feed_forward.experts.w1"))
    assert not fp8.fp8_weight("layers.0.attention.wq.weight", (64, 40))  # not a multiple of 16: _scaled_mm refuses


def test_flops_by_format_by_hand_and_summing_to_the_rows_flops():
    case = TrainCase(TINY, "bf16", fp8="tensorwise")
    # tiny, per block: wq 64x64 + wk 32x64 + wv 32x64 + wo 64x64 = 12,288; SwiGLU 3 x 192 x 64 = 36,864; 2 blocks
    split = case.flops_by_format()
    assert split["fp8"] == 6 * 2 * (12_288 + 36_864) * 2 * 32
    assert split["fp8"] + split["bf16"] == pytest.approx(case.flops()) and split["bf16"] > 0
    assert TrainCase(TINY, "bf16").flops_by_format() is None
    assert case.restate({}) == {"flops_by_format": split}


def test_the_fp8_setting_makes_its_own_cases_and_needs_bf16():
    workload = {"name": "transformer", "model": dataclasses.asdict(TINY), "fp8": ["none", "rowwise"]}
    cases = expand(workload, "bf16", 0)
    assert [c.case_id for c in cases] == ["transformer-bf16-tiny-b2-s32", "transformer-bf16-tiny-b2-s32-fp8-rowwise"]
    assert "fp8" not in cases[0].params() and cases[1].params()["fp8"] == "rowwise"
    with pytest.raises(ConfigError, match="bf16"):
        expand({**workload, "fp8": "tensorwise"}, "fp32", 0)
    with pytest.raises(ConfigError):
        expand({**workload, "fp8": "blockwise"}, "bf16", 0)


def test_the_loss_check_passes_close_curves_and_fails_a_step_that_trains_otherwise():
    bf16 = [5.5507, 5.4575, 5.3731, 5.2988]
    close = fp8.check_losses("tensorwise", {"fp8_losses": [5.5513, 5.458, 5.374, 5.3], "bf16_losses": bf16}, 32)
    assert close.ok and close.error == pytest.approx(2.26e-4, rel=1e-2) and close.tolerance == fp8.LOSS_TOLERANCE
    stalled = fp8.check_losses("tensorwise", {"fp8_losses": [5.5507] * 4, "bf16_losses": bf16}, 32)
    assert not stalled.ok  # the fp8 step's loss not falling as the bf16 step's does
    short = fp8.check_losses("rowwise", {"fp8_losses": bf16[:2], "bf16_losses": bf16[:2]}, 32)
    assert not short.ok  # fewer steps than the check runs


def test_mfu_against_the_flop_weighted_peak_and_the_bf16_peak_by_hand():
    # 3 parts fp8 at 2000, 1 part bf16 at 1000: at peak the step takes 3/2000 + 1/1000 = 2.5e-3 per FLOP unit, so
    # the weighted peak is 4 / 2.5e-3 = 1600 TFLOP/s (the arithmetic mean would say 1750)
    out = FormatMfu(**formats.derive(800.0, {"fp8": 3.0, "bf16": 1.0}, {"fp8": 2000.0, "bf16": 1000.0}, {}, None))
    assert out.weighted_peak_tflops == pytest.approx(1600) and out.mfu_weighted == pytest.approx(0.5)
    assert out.mfu_bf16 == pytest.approx(0.8) and "1600 TFLOP/s" in out.mfu_weighted_denominator
    assert out.words() == ("MFU 80.0% of the bf16 peak (1000 TFLOP/s), every FLOP at the bf16 rate; 50.0% of the "
                           "FLOP-weighted peak of the formats used (bf16 25.0% of the FLOPs at 1000 TFLOP/s + fp8 "
                           "75.0% of the FLOPs at 2000 TFLOP/s): 1600 TFLOP/s")
    assert "bf16 25.0%" in out.mfu_weighted_denominator and "1000 TFLOP/s" in out.mfu_bf16_denominator
    no_fp8 = formats.derive(0.5, {"fp8": 3.0, "bf16": 1.0}, {"fp8": None, "bf16": 1.0}, {"fp8": "no fp8 here"}, None)
    assert no_fp8["mfu_weighted"] is None and "no fp8 here" in no_fp8["mfu_weighted_reason"]
    assert no_fp8["mfu_bf16"] == pytest.approx(0.5)
    invalid = formats.derive(0.5, {"fp8": 1.0}, {"fp8": 2.0, "bf16": 1.0}, {}, "interpreter")
    assert invalid["mfu_weighted"] is None and invalid["mfu_bf16_reason"] == "timing not valid: interpreter"


def test_the_engine_looks_up_each_formats_peak_for_an_fp8_step():
    h100 = gpu_device("NVIDIA H100 80GB HBM3", 132)
    case = TrainCase(TINY, "bf16", fp8="tensorwise")
    bf16, fp8_peak = lookup(h100, "bf16"), lookup(h100, "fp8")
    assert (bf16.tflops, fp8_peak.tflops) == (989.0, 1979.0)  # the H100 SXM datasheet's dense figures
    out = format_utilization(case, 500.0, h100, bf16, None, None)
    split = out["flops_by_format"]
    share = split["fp8"] / case.flops()
    weighted = 1 / (share / fp8_peak.tflops + (1 - share) / bf16.tflops)
    assert out["mfu_formats"]["mfu_weighted"] == pytest.approx(500 / weighted)
    assert out["mfu_formats"]["mfu_bf16"] == pytest.approx(500 / bf16.tflops)
    override = format_utilization(case, 500.0, h100, Peak(1000.0, "override", "override", ""), None, None)
    assert override["mfu_formats"]["peak_tflops"] == {"fp8": fp8_peak.tflops, "bf16": 1000.0}
    assert format_utilization(TrainCase(TINY, "bf16"), 500.0, h100, bf16, None, None) == {}


def _h100_row() -> tuple[dict, list[dict]]:
    h100 = gpu_device("NVIDIA H100 80GB HBM3", 132)
    case = TrainCase(TINY, "bf16", fp8="rowwise")
    bf16 = lookup(h100, "bf16")
    row = {"status": "ok", "dtype": "bf16", "flops": case.flops(), "tflops": 400.0, "timing_valid": True,
           "peak_tflops": bf16.tflops, "peak_note": bf16.note, "device_index": 0,
           **format_utilization(case, 400.0, h100, bf16, None, None)}
    devices = [{**dataclasses.asdict(h100), "index": 0}]
    return row, devices


def test_validate_re_derives_both_figures_and_names_an_edited_one():
    row, devices = _h100_row()
    settings = Settings()
    assert format_problems(row, devices, settings, "line 1") == []
    edited = {**row, "mfu_formats": {**row["mfu_formats"], "mfu_weighted": row["mfu_formats"]["mfu_bf16"]}}
    assert any("mfu_weighted" in p for p in format_problems(edited, devices, settings, "line 1"))
    split = {**row["flops_by_format"], "fp8": row["flops_by_format"]["fp8"] * 2}
    assert any("sums to" in p for p in format_problems({**row, "flops_by_format": split}, devices, settings, "l"))
    fp8_peak = {**row["mfu_formats"]["peak_tflops"], "fp8": 5000.0}
    forged = {**row, "mfu_formats": {**row["mfu_formats"], "peak_tflops": fp8_peak}}
    assert any("peak_tflops.fp8" in p for p in format_problems(forged, devices, settings, "line 1"))
    assert format_problems({**row, "mfu_formats": None}, devices, settings, "l") != []


def test_the_fp8_linear_in_jax_matches_the_bf16_one_forward_and_backward():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from xmfu.workloads.transformer.jax_fp8 import fp8_linear

    rng = np.random.default_rng(0)
    x, w = (jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in ((2, 32, 64), (48, 64)))
    g = jnp.asarray(rng.standard_normal((2, 32, 48), dtype=np.float32))

    def grads(f):
        return jax.grad(lambda x, w: jnp.sum(f(x, w).astype(jnp.float32) * g), argnums=(0, 1))(x, w)

    ref = jnp.einsum("...i,oi->...o", x, w)
    ref_dx, ref_dw = grads(lambda x, w: jnp.einsum("...i,oi->...o", x, w))
    for recipe in ("tensorwise", "rowwise"):
        out = fp8_linear(x, w, jnp.bfloat16, recipe)
        dx, dw = grads(lambda x, w, recipe=recipe: fp8_linear(x, w, jnp.bfloat16, recipe))
        assert out.dtype == jnp.bfloat16 and out.shape == ref.shape
        for got, want in ((out, ref), (dx, ref_dx), (dw, ref_dw)):  # e4m3/e5m2 rounding: a few percent
            err = float(jnp.linalg.norm(got.astype(jnp.float32) - want) / jnp.linalg.norm(want))
            assert 1e-3 < err < 0.08, (recipe, err)  # rounded (not the bf16 GEMM), and close to it


@pytest.mark.slow
def test_the_jax_fp8_step_passes_its_loss_check_and_states_its_recipe(cpu_ctx):
    pytest.importorskip("optax")
    from xmfu.workloads.transformer import jax as jax_backend

    case = TrainCase(TINY, "bf16", fp8="tensorwise")
    ok, why = jax_backend.available(case, cpu_ctx)
    assert ok, why
    prepared = jax_backend.prepare(case, cpu_ctx)
    check = case.check(prepared.result(None))
    assert check.ok and 0 < check.error < fp8.LOSS_TOLERANCE, check
    assert prepared.notes["fp8"]["recipe"] == "tensorwise" and "float8" in prepared.notes["fp8"]["gemm"]
    from xmfu.workloads.transformer.jax_fp8 import F8_GEMM, gemm_note

    assert "2 fp8 GEMMs" in gemm_note("cuda", f"{F8_GEMM} x {F8_GEMM}")  # read from the compiled HLO off the CPU
    assert "did not run on fp8 units" in gemm_note("cuda", "custom-call(__cublas$lt$matmul)")
    assert np.isfinite(float(prepared.fn()))


def test_torch_without_torchao_skips_an_fp8_step_with_the_install_hint(cpu_ctx, monkeypatch):
    pytest.importorskip("torch")
    from xmfu.workloads.transformer import torch as torch_backend
    from xmfu.workloads.transformer import torch_fp8

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    ok, why = torch_backend.available(TrainCase(TINY, "bf16", fp8="rowwise"), cpu_ctx)
    assert not ok and why == torch_fp8.INSTALL_HINT and "xmfu[fp8]" in why
    assert torch_backend.available(TrainCase(TINY, "bf16"), cpu_ctx)[0]
    distributed = TrainCase(TINY, "bf16", fp8="rowwise", parallel="ddp", world_size=None)
    assert "single-device" in torch_fp8.unavailable(distributed)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_torchao_converts_exactly_the_fp8_layers_and_the_step_passes_its_check(recipe, cpu_ctx):
    pytest.importorskip("torchao", reason="torchao is optional (pip install 'xmfu[fp8]')")
    from xmfu.workloads.transformer import torch as torch_backend

    case = TrainCase(MOE_TINY, "bf16", fp8=recipe)
    ok, why = torch_backend.available(case, cpu_ctx)
    assert ok, why
    prepared = torch_backend.prepare(case, cpu_ctx)
    check = case.check(prepared.result(None))
    assert check.ok and 0 < check.error < fp8.LOSS_TOLERANCE, check
    shapes = MOE_TINY.weight_shapes()
    assert prepared.notes["fp8"]["linear_layers"] == sum(fp8.fp8_weight(n, s) for n, s in shapes.items())
    assert prepared.notes["fp8"]["recipe"] == recipe and "torchao" in prepared.notes["fp8"]["library"]


@dataclasses.dataclass(frozen=True)
class MixedCase(FakeCase):
    """A case whose FLOPs run in two formats, as an fp8 training step's do."""

    def flops_by_format(self):
        return {"fp8": 0.75 * self.flops(), "bf16": 0.25 * self.flops()}


def test_the_engine_writes_both_figures_and_validate_re_derives_them(tmp_path):
    runner, writer = _runner(tmp_path, peak_tflops=2.0)
    workload = WorkloadDef("fake", FAKE.expand, {"good": Implementation("good", always, lambda c, x: _prepared(1.0))})
    runner.run_phase(Phase("main", workload, [MixedCase(1, dtype="bf16")], ["good"]))
    writer.finalize("complete")
    row = read_bundle(tmp_path / "b").rows[0]
    m = row.mfu_formats
    assert row.status == "ok" and row.flops_by_format == {"fp8": 750.0, "bf16": 250.0}
    assert m.peak_tflops == {"fp8": None, "bf16": 2.0} and m.mfu_bf16 == pytest.approx(row.mfu)
    assert m.mfu_weighted is None and "no fp8 peak: CPUs have no fp8" in m.mfu_weighted_reason
    assert m.words().startswith("MFU ") and "of the bf16 peak (2 TFLOP/s)" in m.words()
    assert "FLOP-weighted peak of the formats used: n/a (no fp8 peak" in m.words()
    assert validate_bundle(tmp_path / "b") == []
    step = verdict.training([msgspec.structs.replace(row, workload="transformer")], None)[0]  # the verdict page's
    assert step["mfu_words"] == m.words() and step["mfu_by_denominator"] == [
        ["bf16 datasheet peak (MFU)", row.mfu], ["FLOP-weighted peak of the formats used (MFU)", None]]


def test_the_fp8_flops_are_what_torchs_flop_counter_counts_in_the_converted_layers():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchao", reason="torchao is optional (pip install 'xmfu[fp8]')")
    from torch.utils.flop_counter import FlopCounterMode

    from xmfu.workloads.transformer.torch_fp8 import convert
    from xmfu.workloads.transformer.torch_model import Transformer, load_weights

    case = TrainCase(TINY, "bf16", fp8="tensorwise")
    model = Transformer(TINY)
    load_weights(model, case.weights())
    convert(model, "tensorwise")
    tokens, targets = (torch.from_numpy(a) for a in case.batch_tokens())
    with FlopCounterMode(display=False) as counter:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(tokens, targets)
        loss.backward()
    counts = counter.get_flop_counts()
    # per block (the counter places a backward GEMM in the right block, not always in the right linear of it):
    # every linear of the attention and the dense MLP is a Float8Linear here
    fp8_flops = sum(sum(counts[f"Transformer.layers.{i}.{part}"].values())
                    for i in range(TINY.n_layers) for part in ("attention", "feed_forward"))
    assert fp8_flops == case.flops_by_format()["fp8"]
