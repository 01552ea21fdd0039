"""Inference formulas against hand computations on the tiny preset, the sweep, the figures hook and the check."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.machine.peaks import BandwidthPeak
from xmfu.workloads.inference import arithmetic as ar
from xmfu.workloads.inference.cases import InferenceCase
from xmfu.workloads.inference.reference import _greedy_mismatches, check_generation, reference_logits
from xmfu.workloads.inference.spec import parse_specs
from xmfu.workloads.transformer.spec import model_from_config

TINY = model_from_config(yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text()))
# tiny: V 256, d 64, L 2, H 4, Hkv 2, Dh 16, F 192. Per layer 2·64 (norms) + 4096 + 2048 + 2048 + 4096 (wq wk wv wo)
# + 3·12288 (w1 w3 w2) = 49280; N (non-embedding) = 2·49280 + 64 (final norm) + 256·64 (output) = 115008.
N = 115_008
KNOWN = BandwidthPeak(1000.0, "test", "override", "")
UNKNOWN = BandwidthPeak(None, None, None, "not in the table; pass peak_membw_gbps=")


def test_memory_and_byte_formulas_by_hand():
    assert TINY.param_counts()["non_embedding"] == N
    assert ar.kv_bytes_per_token(TINY, 2) == 2 * 2 * 2 * 16 * 2 == 256  # K and V, L, Hkv, Dh, bf16
    assert ar.kv_cache_bytes(TINY, 4, 24, 2) == 4 * 24 * 256
    assert ar.weight_bytes(TINY, 2) == N * 2
    assert ar.weight_bytes(TINY, 2, rows_looked_up=4) == (N + 4 * 64) * 2
    assert ar.weight_bytes(TINY, 4, rows_looked_up=10_000) == (N + 256 * 64) * 4  # at most the whole table
    # decode step, B=1, P=16, G=8: mean keys 16 + 9/2 = 20.5 (steps attend 17..24)
    assert ar.mean_context(16, 8) == 20.5 == np.mean(np.arange(17, 25))
    assert ar.decode_step_bytes(TINY, 1, 20.5, 2) == (N + 64) * 2 + 20.5 * 256 + 256 == 235_648
    assert ar.prefill_bytes(TINY, 2, 16, 2) == (N + 32 * 64) * 2 + 32 * 256 == 242_304


def test_flop_formulas_by_hand():
    assert ar.attention_flops_per_key(TINY) == 4 * 2 * 4 * 16 == 512
    assert ar.decode_step_flops(TINY, 1, 20.5) == 2 * N + 20.5 * 512 == 240_512
    # prefill B=2, P=16: every weight but the output layer on 16 tokens, the output layer on the last one
    linear = 2 * (N - 64 * 256) * 16 + 2 * 64 * 256
    assert ar.prefill_flops(TINY, 2, 16, "palm") == 2 * (linear + 16 * 16 * 512) == 6_639_616
    assert ar.prefill_flops(TINY, 2, 16, "causal") == 2 * (linear + 16 * 8 * 512) == 6_508_544
    assert ar.mbu(235_648, 1e-3, 1000.0) == pytest.approx(235_648 / 1e-3 / 1e12)


def test_the_sweep_expands_into_prefill_and_decode_cases():
    workload = {"name": "inference", "model": {**vars(TINY)}, "batch": [1, 4], "prompt_len": 16, "gen_len": [4, 8],
                "check_steps": 2}
    cases = parse_specs(workload, "bf16", 0)
    assert [(c.phase, c.batch, c.gen_len) for c in cases] == [
        ("prefill", 1, 8), ("decode", 1, 4), ("decode", 1, 8), ("prefill", 4, 8), ("decode", 4, 4), ("decode", 4, 8)]
    assert cases[0].case_id == "inference-bf16-tiny-prefill-b1-p16" and cases[0].cache_len == 24
    assert cases[2].case_id == "inference-bf16-tiny-decode-b1-p16-g8"
    assert cases[2].params()["batch"] == 1 and cases[2].params()["params"] == 131_392
    assert cases[0].work_units() == {"prompt_tokens": 16.0}
    assert cases[2].work_units() == {"generated_tokens": 1.0, "generated_tokens_per_sequence": 1.0}
    assert [c.phase for c in parse_specs({**workload, "phases": ["decode"]}, "fp32", 0)] == ["decode"] * 4
    # the prompts of sequence 0 do not depend on the batch size
    assert (cases[3].prompts()[0] == cases[0].prompts()[0]).all() and cases[3].prompts().shape == (4, 16)


@pytest.mark.parametrize(("change", "field"), [
    ({"check_steps": 9}, "workload.check_steps"), ({"phases": ["serve"]}, "workload.phases[0]"),
    ({"batch": [0]}, "workload.batch[0]"), ({"gen_len": []}, "workload.gen_len"), ({"sampling": "top_p"},
                                                                                  "workload.sampling")])
def test_bad_settings_name_the_field(change, field):
    workload = {"name": "inference", "model": {**vars(TINY)}, "batch": 1, "prompt_len": 8, "gen_len": 8, **change}
    with pytest.raises(ConfigError) as err:
        parse_specs(workload, "bf16", 0)
    assert err.value.field == field


def test_only_fp32_and_bf16_are_inference_dtypes():
    with pytest.raises(ConfigError) as err:
        parse_specs({"name": "inference", "model": {**vars(TINY)}, "batch": 1, "prompt_len": 8, "gen_len": 8}, "fp8", 0)
    assert err.value.field == "dtype" and "bf16" in str(err.value)


def test_figures_hook_gives_percentiles_mbu_and_the_reasons():
    decode = InferenceCase(TINY, "bf16", "decode", 1, 16, 8)
    samples = [[1e-3] * 8 + [2e-3] * 2, [1e-3] * 6]  # two repeats
    out = decode.figures({"median": 1e-3}, samples, KNOWN, None)
    assert out["tpot_s"]["p50"] == 1e-3 and out["tpot_s"]["n"] == 16 and out["tpot_s"]["generations"] == 2.0
    assert out["tpot_s"]["p99"] == pytest.approx(np.percentile([1e-3] * 14 + [2e-3] * 2, 99))
    assert out["mbu"] == pytest.approx(235_648 / 1e-3 / 1e12) and out["peak_membw_gbps"] == 1000.0
    assert out["kv_cache_bytes"] == 24 * 256 and out["weights_bytes"] == N * 2
    unknown = decode.figures({"median": 1e-3}, samples, UNKNOWN, None)
    assert unknown["mbu"] is None and "peak_membw_gbps=" in unknown["mbu_reason"]
    untimed = decode.figures(None, [], KNOWN, "Triton interpreter")
    assert untimed["mbu"] is None and untimed["tpot_s"] is None and "Triton interpreter" in untimed["mbu_reason"]
    prefill = InferenceCase(TINY, "bf16", "prefill", 1, 16, 8).figures({"median": 2e-3}, [[2e-3, 4e-3]], KNOWN, None)
    assert prefill["ttft_s"]["p50"] == pytest.approx(3e-3) and prefill["mbu"] is None
    assert "compute-bound" in prefill["mbu_reason"] and "tpot_s" not in prefill


def test_near_ties_are_not_compared_and_a_clear_wrong_token_is_caught():
    ref = np.array([[0.0, 1.0, 0.99], [0.0, 1.0, 0.5]])  # step 0: a near-tie; step 1: a clear winner
    assert _greedy_mismatches(np.array([2, 1]), ref, threshold=0.1) == ([], 1)  # the tie may go either way
    assert _greedy_mismatches(np.array([1, 2]), ref, threshold=0.1) == ([1], 1)


def _greedy_reference(case: InferenceCase) -> tuple[np.ndarray, np.ndarray]:
    """The fp64 model's own greedy generation: (logits at P-1 .. P-1+steps, the tokens they pick)."""
    prompt, p = tuple(int(t) for t in case.prompts()[0]), case.prompt_len
    tokens: tuple[int, ...] = ()
    for _ in range(case.check_steps + 1):
        ref = reference_logits(TINY, case.dtype, 0, prompt + tokens, p - 1)
        tokens = tuple(int(t) for t in ref.argmax(-1))[:len(tokens) + 1]
    return ref, np.array(tokens)


def test_check_catches_wrong_logits_and_wrong_tokens():
    case = InferenceCase(TINY, "fp32", "decode", 1, 8, 4, check_steps=2)
    ref, tokens = _greedy_reference(case)
    good = check_generation(case, {"logits": ref, "tokens": tokens})
    assert good.ok and good.error == 0.0 and "fp64 model" in good.checked and "near-ties skipped" in good.checked
    scaled = case.check({"logits": ref * 1.01, "tokens": tokens})
    assert not scaled.ok and scaled.error == pytest.approx(0.01, rel=1e-6)
    wrong = tokens.copy()  # the last token picked is not fed back, so the reference's prefix stays the same
    wrong[-1] = (wrong[-1] + 1) % TINY.vocab
    bad = case.check({"logits": ref, "tokens": wrong})
    assert not bad.ok and bad.metric == "greedy tokens differing from the fp64 reference's argmax (steps [2])"
