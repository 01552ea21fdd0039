"""Model presets, parameter counts and the two FLOP conventions, checked against the model's real matmuls."""

from __future__ import annotations

import pytest
import yaml

from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.engine.declare import ConfigError
from xmfu.workloads.transformer.cases import TrainCase, expand
from xmfu.workloads.transformer.spec import model_from_config

PARAMS = {"tiny": 131_392, "125m": 134_105_856, "350m": 373_867_520, "1b": 1_498_482_688,
          "3b": 3_606_752_256, "8b": 8_030_261_248}


def preset(name: str):
    return model_from_config(yaml.safe_load((CONFIG_DIR / "model" / f"{name}.yaml").read_text()))


@pytest.mark.parametrize("name", list(PARAMS))
def test_parameter_counts_match_the_torch_model(name):
    torch = pytest.importorskip("torch")
    from xmfu.workloads.transformer.torch_model import Transformer

    spec = preset(name)
    assert spec.param_counts()["total"] == PARAMS[name]
    with torch.device("meta"):  # shapes only: an 8b model costs nothing here
        model = Transformer(spec)
    assert sum(p.numel() for p in model.parameters()) == PARAMS[name]
    assert f"{PARAMS[name]:,}" in (CONFIG_DIR / "model" / f"{name}.yaml").read_text()  # stated in the preset


def test_palm_and_causal_flops_against_the_model_matmuls():
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from xmfu.workloads.transformer.torch_model import Transformer, load_weights

    spec = preset("tiny")
    case = TrainCase(spec, "fp32")
    model = Transformer(spec)
    load_weights(model, case.weights())
    tokens, targets = (torch.from_numpy(a) for a in case.batch_tokens())
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        model(tokens, targets)  # the math kernel computes (and is counted for) every score entry
    forward = counter.get_total_flops()
    counts = spec.param_counts()
    norms = sum(v for n, v in ((n, s[0]) for n, s in spec.weight_shapes().items() if len(s) == 1))
    linear = counts["non_embedding"] - norms
    attention = 4 * spec.batch * spec.n_layers * spec.n_heads * spec.head_dim * spec.seq_len**2
    assert forward == 2 * case.tokens * linear + attention  # the model's matmuls, counted by torch
    # palm = 3 x forward (backward = 2 x forward) + the norm weights that 6N also counts
    assert case.flops() == 3 * forward + 6 * case.tokens * norms
    causal = TrainCase(spec, "fp32", flop_convention="causal")
    assert causal.flops() == 3 * (forward - attention / 2) + 6 * case.tokens * norms


def test_hardware_flops_add_the_recomputed_forward():
    spec = preset("tiny")
    plain, remat = TrainCase(spec, "bf16"), TrainCase(spec, "bf16", activation_checkpointing=True)
    assert plain.hardware_flops() is None
    attention_fwd = 4 * spec.n_layers * spec.n_heads * spec.head_dim * spec.seq_len
    extra = remat.tokens * (2 * spec.param_counts()["blocks"] + attention_fwd)
    assert remat.hardware_flops() == pytest.approx(remat.flops() + extra)


def test_expand_batch_sweep_and_errors():
    model = yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text())
    cases = expand({"name": "transformer", "model": model, "batch": [1, 2, 4]}, "bf16", 0)
    assert [c.model.batch for c in cases] == [1, 2, 4] and cases[2].tokens == 4 * 32
    with pytest.raises(ConfigError, match="training dtype"):
        expand({"name": "transformer", "model": model}, "fp8", 0)
    with pytest.raises(ConfigError, match="n_heads"):
        expand({"name": "transformer", "model": {**model, "n_kv_heads": 3}}, "bf16", 0)


@pytest.mark.parametrize("name", ["a/b", "../up", "..", "x..y", "", ".hidden", "sp ace", "back\\slash"])
def test_a_model_name_that_is_no_plain_name_is_refused_at_config_time(name):
    # the name is part of every case id, and the case id of a profiler trace's file name in the bundle (issue 26)
    data = {**yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text()), "name": name}
    with pytest.raises(ConfigError, match=r"model\.name"):
        model_from_config(data)


@pytest.mark.parametrize("name", [*PARAMS, "llama-3.1_8b+x", "Tiny2"])
def test_plain_model_names_are_accepted(name):
    data = {**yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text()), "name": name}
    assert model_from_config(data).name == name
