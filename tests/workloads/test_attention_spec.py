"""Attention FLOPs under both conventions and both alignments, bytes, config errors, and cross-checks."""

from __future__ import annotations

import numpy as np
import pytest

from xmfu.harness.engine.declare import ConfigError
from xmfu.workloads.attention import reference
from xmfu.workloads.attention.spec import AttentionCase, expand


def case(sq=4, skv=6, d=2, causal=False, alignment="top_left", mode="fwd", convention="fa2", heads=1, kv=1,
         dtype="fp32", batch=1, scale=None):
    return AttentionCase(batch, heads, kv, sq, skv, d, causal, alignment, scale or d**-0.5, dtype, mode,
                         convention)


def test_fa2_flops_by_hand():
    assert case().flops() == 4 * 4 * 6 * 2  # 4·B·H·Sq·Skv·D = 192
    assert case(causal=True).flops() == 96  # causal: half
    assert case(mode="bwd").flops() == 192 * 2.5
    assert case(mode="fwd_bwd").flops() == 192 * 3.5
    assert case(heads=8, kv=2, batch=3).flops() == 192 * 8 * 3  # GQA does not change the FLOPs


def test_the_default_counts_the_causal_pairs_of_a_rectangular_shape():
    # A prefill of 1024 queries against a 4096-entry cache: fa2's "half of Sq·Skv" counted 4x the scores the
    # top-left mask keeps (issue 25, item 19). The default counts the pairs, per alignment.
    def flops(alignment: str, convention: str | None = None) -> float:
        workload = {"name": "attention", "batch": 1, "heads": 1, "seq_q": [1024], "seq_kv": [4096],
                    "head_dim": [64], "causal": [True], "mode": ["fwd"], "alignment": alignment,
                    **({"flop_convention": convention} if convention else {})}
        (c,) = expand(workload, "bf16", 0)
        return c.flops()

    per_entry = 4 * 64
    assert flops("top_left") == per_entry * 1024 * 1025 // 2  # query i sees keys 0..i
    assert flops("bottom_right") == per_entry * (1024 * 3072 + 1024 * 1025 // 2)  # and the 3072 before them
    assert flops("top_left", "fa2") == per_entry * 1024 * 4096 / 2  # fa2 stays, named, counting what it says
    assert flops("top_left", "fa2") / flops("top_left") == pytest.approx(4, rel=1e-3)
    (square,) = expand({"name": "attention", "batch": 1, "heads": 1, "seq_q": [512], "head_dim": [64],
                        "causal": [True], "mode": ["fwd"]}, "bf16", 0)
    assert square.flop_convention == "exact" and square.flops() == per_entry * 512 * 513 // 2


def test_exact_flops_count_visible_scores_per_alignment():
    # top-left: query i sees keys 0..i -> 1+2+3+4 = 10 of 24 entries
    assert case(causal=True, convention="exact").visible_scores() == 10
    assert case(causal=True, convention="exact").flops() == 4 * 2 * 10
    # bottom-right (offset 6-4=2): query i sees keys 0..i+2 -> 3+4+5+6 = 18
    assert case(causal=True, alignment="bottom_right", convention="exact").visible_scores() == 18
    assert case(causal=True, alignment="bottom_right", convention="exact", mode="fwd_bwd").flops() == 4 * 2 * 18 * 3.5
    assert case(convention="exact").flops() == case().flops()  # non-causal: both conventions agree
    # top-left with more queries than keys: rows past the keys see all 6
    assert case(sq=8, skv=6, causal=True, convention="exact").visible_scores() == 1 + 2 + 3 + 4 + 5 + 6 + 6 + 6


def test_bytes_are_gqa_aware():
    c = case(sq=8, skv=16, d=4, heads=8, kv=2, dtype="bf16")
    q, kv = 8 * 8 * 4 * 2, 2 * 16 * 4 * 2
    assert c.bytes_moved() == 2 * q + 2 * kv
    assert case(sq=8, skv=16, d=4, heads=8, kv=2, dtype="bf16", mode="fwd_bwd").bytes_moved() == 6 * q + 6 * kv


def test_alignments_really_differ_when_lengths_differ():
    top = reference.causal_mask(3, 5, 0)
    bottom = reference.causal_mask(3, 5, 2)
    assert top.sum() == 6 and bottom.sum() == 12 and bottom[0].tolist() == [True, True, True, False, False]
    np.testing.assert_array_equal(reference.causal_mask(4, 4, 0), np.tril(np.ones((4, 4), bool)))


def test_reference_selection_matches_full():
    c = case(sq=5, skv=7, d=4, heads=4, kv=2, batch=2, causal=True, mode="fwd_bwd")
    full = reference.attention(c, c.inputs(), None)
    qb, qh, kb, kh = np.array([1, 1]), np.array([2, 3]), np.array([1]), np.array([1])
    part = reference.attention(c, c.inputs(), {"out": (qb, qh), "dq": (qb, qh), "dk": (kb, kh), "dv": (kb, kh)})
    np.testing.assert_allclose(part["out"], full["out"][qb, qh])
    np.testing.assert_allclose(part["dk"], full["dk"][kb, kh])


def test_large_cases_check_two_kv_groups():
    sel = case(sq=4096, skv=4096, d=128, heads=32, kv=8, batch=4).check_rows()
    assert sel["out"][1].tolist() == [0, 1, 2, 3, 28, 29, 30, 31]
    assert sel["dk"][1].tolist() == [0, 7] and sel["dk"][0].tolist() == [0, 3]


def test_expand_sweeps_and_rejects_bad_settings():
    cases = expand({"name": "attention", "seq_q": [16, 32], "head_dim": [64, 128], "causal": [False, True],
                    "mode": ["fwd", "fwd_bwd"], "heads": 4, "kv_heads": 2}, "bf16", 0)
    assert len(cases) == 16 and cases[0].scale == pytest.approx(64**-0.5)
    with pytest.raises(ConfigError, match="kv_heads"):
        expand({"name": "attention", "heads": 6, "kv_heads": 4}, "bf16", 0)
    with pytest.raises(ConfigError, match="no visible key"):
        expand({"name": "attention", "seq_q": [64], "seq_kv": [32], "causal": [True],
                "alignment": "bottom_right"}, "bf16", 0)
    with pytest.raises(ConfigError, match="attention dtype"):
        expand({"name": "attention"}, "fp8", 0)
    with pytest.raises(ConfigError, match=r"workload\.mode"):
        expand({"name": "attention", "mode": ["sideways"]}, "bf16", 0)


def test_flops_match_torch_flop_counter_for_non_causal_sdpa():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    c = case(sq=8, skv=12, d=16, heads=2, kv=2)
    q, k, v = (torch.from_numpy(c.inputs()[n]) for n in ("q", "k", "v"))
    # The math kernel decomposes into the two matmuls FlopCounterMode counts (it has no formula for the
    # CPU flash kernel). For a causal mask it still counts every score entry, since the math path computes
    # the full QKᵀ and masks afterwards; the fa2 convention halves it, so causal counts differ by design.
    for causal, expected in ((False, c.flops()), (True, 2 * case(sq=8, skv=12, d=16, heads=2, kv=2,
                                                                  causal=True).flops())):
        with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert counter.get_total_flops() == expected


# batch_seq names batch and seq_q, model_dim derives heads: the defaults of those three are set aside, as
# configs/experiment/attention-shootout.yaml does
PAIRED = {"name": "attention", "batch": None, "seq_q": None, "heads": None}


def test_flashattention_benchmark_shapes_pair_batch_with_seq_and_derive_heads():
    cases = expand({**PAIRED, "batch_seq": [[32, 512], [1, 16384]], "model_dim": 2048,
                    "head_dim": [64, 128], "causal": [False], "mode": ["fwd"]}, "bf16", 0)
    shapes = {(c.batch, c.seq_q, c.seq_kv, c.heads, c.head_dim) for c in cases}
    assert shapes == {(32, 512, 512, 32, 64), (32, 512, 512, 16, 128), (1, 16384, 16384, 32, 64),
                      (1, 16384, 16384, 16, 128)}
    with pytest.raises(ConfigError, match="batch_seq"):
        expand({**PAIRED, "batch_seq": [[32]]}, "bf16", 0)
    with pytest.raises(ConfigError, match=r"workload\.batch"):  # both named: neither is silently ignored
        expand({**PAIRED, "batch": 4, "batch_seq": [[32, 512]]}, "bf16", 0)
    with pytest.raises(ConfigError, match=r"workload\.heads"):
        expand({"name": "attention", "heads": 8, "model_dim": 2048}, "bf16", 0)
    with pytest.raises(ConfigError, match="model_dim"):
        expand({"name": "attention", "heads": None, "model_dim": 100, "head_dim": [64]}, "bf16", 0)
