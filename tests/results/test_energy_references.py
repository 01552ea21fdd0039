"""J/token against the public J/token references (issue 39 item 4): an inference row's least J/token per phase,
batch and length, and each training step's, compared with ML.ENERGY's figure at the same model, phase, batch,
dtype and device (less is better: the ratio is the reference over xmfu's), else "no public reference" with why,
or "not measured" with the row's reason."""

from __future__ import annotations

import pytest

from tests.results.rows import valid_row
from xmfu.harness.machine.references import Bands
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.suites import verdict, yardsticks

H100 = "nvidia-h100-sxm"
DECODE_64 = {"name": "8b", "phase": "decode", "batch": 64, "prompt_len": 512, "gen_len": 128}


def _inference(backend: str, j: float | None, params=DECODE_64, device=H100):
    kind = "generated_tokens" if params["phase"] == "decode" else "prompt_tokens"
    energy = ({"source": "counter", "scope": "device", "mean_power_w": 600.0, "j_per_token": {kind: j},
               "j_per_token_ci95": {kind: [0.95 * j, 1.05 * j]}} if j is not None else
              {"source": "not measured", "scope": "device", "reason": "no NVML here"})
    return typed(valid_row(workload="inference", backend=backend, dtype="bf16", params=params, peak_entry=device,
                           case_id=f"inference-bf16-8b-{params['phase']}-b{params['batch']}", tflops=10.0,
                           energy=energy))


def _figures(rows):
    return {"training": [], "inference_energy": verdict.inference_energy(rows)}


def test_the_least_j_per_token_over_the_backends_is_the_figure_with_its_conditions():
    (f,) = verdict.inference_energy([_inference("torch", 0.20), _inference("torch_compile", 0.10),
                                     _inference("jax", None)])
    assert (f["backend"], f["j_per_token"], f["lengths"]) == ("torch_compile", 0.10, "p512-g128")
    assert f["conditions"] == {"model": "8b", "phase": "decode", "batch": 64, "dtype": "bf16", "world_size": 1}


def test_a_decode_row_at_the_references_model_batch_and_device_is_judged_less_is_better():
    (y,) = yardsticks.of_node("n1", _figures([_inference("torch", 0.10)]), None, Bands())
    assert y.reference_id == "mlenergy-v3-h100-llama3.1-8b-chat-decode-b64" and y.reference == 0.1186
    assert y.ratio == pytest.approx(0.1186 / 0.10) and y.band == "within"  # less energy than the reference
    assert y.ratio_ci95 == pytest.approx([0.1186 / 0.105, 0.1186 / 0.095])  # the CI's ends swap
    assert y.source.startswith("https://github.com/ml-energy/leaderboard/") and y.unit == "J/token"
    (far,) = yardsticks.of_node("n1", _figures([_inference("torch", 0.20)]), None, Bands())
    assert far.ratio == pytest.approx(0.1186 / 0.20) and far.band == "far below"
    (problem,) = yardsticks.problems([far])
    assert "J/token" in problem and "far below" in problem and "mlenergy-v3-h100-llama3.1-8b-chat-decode-b64" in problem


def test_another_batch_phase_model_or_device_has_no_public_reference():
    for params, device in [({**DECODE_64, "batch": 63}, H100), ({**DECODE_64, "phase": "prefill"}, H100),
                           ({**DECODE_64, "name": "3b"}, H100), (DECODE_64, "nvidia-h200-sxm")]:
        (y,) = yardsticks.of_node("n1", _figures([_inference("torch", 0.10, params, device)]), None, Bands())
        assert y.reference is None and y.source.startswith(f"no public reference for {device}, model "), params
    (y,) = yardsticks.of_node("n1", _figures([_inference("torch", 0.10, {**DECODE_64, "batch": 63})]), None, Bands())
    assert y.source == ("no public reference for nvidia-h100-sxm, model 8b, phase decode, batch 63, dtype bf16, "
                        "world_size 1")


def test_a_row_without_energy_says_not_measured_with_its_reason():
    (y,) = yardsticks.of_node("n1", _figures([_inference("torch", None)]), None, Bands())
    assert y.value is None and y.source == "not measured: no NVML here" and yardsticks.cells(y)[2] == "not measured"


def test_a_training_steps_j_per_token_is_compared_or_has_no_public_reference():
    t = {"backend": "torch", "case_id": "transformer-bf16-8b-b1-s2048", "tokens_per_s": 1000.0, "device_id": H100,
         "dtype": "bf16", "model": "8b", "seq_len": 2048, "batch": 1, "world_size": 1, "nodes": 1,
         "j_per_token": 0.5, "energy_reason": None}
    ys = yardsticks.of_node("n1", {"training": [t]}, None, Bands())
    energy = next(y for y in ys if y.figure.endswith("J/token"))
    assert energy.value == 0.5 and energy.source == (
        "no public reference for nvidia-h100-sxm, model 8b, phase training, batch 1, dtype bf16, world_size 1")
