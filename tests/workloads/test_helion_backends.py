"""helion backends: skipped naming the extra where helion is not installed; with helion installed (e.g.
`pip install --target /tmp/helion-site helion --no-deps` and PYTHONPATH), checked in Triton's interpreter at odd sizes.
"""

from __future__ import annotations

import importlib.util

import pytest

from xmfu.workloads.attention import helion as attention_helion
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.matmul import helion as matmul_helion
from xmfu.workloads.matmul.spec import MatmulCase

HAS_HELION = importlib.util.find_spec("helion") is not None


def _attention(causal=True, alignment="top_left", dtype="fp32", mode="fwd", sq=19, skv=37):
    return AttentionCase(1, 4, 2, sq, skv, 64, causal, alignment, 0.125, dtype, mode)


def test_not_installed_is_skipped_naming_the_extra(cpu_ctx, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "helion" else real(name, *a))
    for ok, why in (matmul_helion.available(MatmulCase(67, 45, 53, "fp32"), cpu_ctx),
                    attention_helion.available(_attention(), cpu_ctx)):
        assert not ok and why == "helion is not installed (pip install 'xmfu[helion]')"


@pytest.mark.skipif(not HAS_HELION, reason="helion is not installed (pip install 'xmfu[helion]')")
def test_refusals_in_the_interpreter(cpu_ctx):
    ok, why = attention_helion.available(_attention(mode="fwd_bwd"), cpu_ctx)
    assert not ok and "forward-only" in why
    ok, why = matmul_helion.available(MatmulCase(67, 45, 53, "bf16"), cpu_ctx)
    assert not ok and "only fp32 in Triton's interpreter" in why


@pytest.mark.skipif(not HAS_HELION, reason="helion is not installed (pip install 'xmfu[helion]')")
@pytest.mark.slow(seconds=100)
def test_helion_kernels_match_the_reference_in_the_interpreter(cpu_ctx):
    case = MatmulCase(67, 45, 53, "fp32")
    prepared = matmul_helion.prepare(case, cpu_ctx)
    prepared.fn()
    check = case.check(prepared.result(None))
    assert check.ok, check
    assert not prepared.timing_valid and prepared.notes["config"].startswith("Config(")
    for case in (_attention(), _attention(alignment="bottom_right"), _attention(sq=33, skv=21),
                 _attention(causal=False)):
        prepared = attention_helion.prepare(case, cpu_ctx)
        check = case.check(prepared.result(case.check_rows()))
        assert check.ok, (case, check)
