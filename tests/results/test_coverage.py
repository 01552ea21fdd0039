"""The coverage matrix: the suite against platform/device, each cell's status and reason, share per platform."""

from __future__ import annotations

import pytest

from tests.results.rows import attention_row, matmul_row, untimed_row
from xmfu.harness.results.analysis.coverage import coverage, of_row, render_html, variant
from xmfu.harness.results.bundle.reader import typed


def _rows():
    cuda = [matmul_row(256, 256, 256), matmul_row(512, 512, 512),
            attention_row(128, True, "fwd"), attention_row(128, False, "fwd_bwd")]
    rocm = [{**r, "platform": "rocm", "device": "MI300X"} for r in cuda[:3]]
    rocm[1] = {**untimed_row("failed", reason="HIP out of memory"), **{k: rocm[1][k] for k in (
        "workload", "backend", "dtype", "params", "platform", "device", "case_id")}}
    rocm[2] = {**rocm[2], "status": "incorrect", "reason": "max error 0.4 > 0.02"}
    skipped = {**untimed_row("skipped", reason="needs an NVIDIA GPU"), **{k: cuda[2][k] for k in (
        "workload", "dtype", "params", "case_id")}, "backend": "jax_cudnn", "platform": "rocm", "device": "MI300X"}
    return cuda + rocm + [skipped]


def _matrix(rows):
    return coverage(of_row(typed(r)) for r in rows)


def test_cells_say_ok_or_the_worst_status_with_its_reason():
    cov = _matrix(_rows())
    cuda, rocm = ("cuda", "GPU A"), ("rocm", "MI300X")
    assert cov.columns == [cuda, rocm]
    matmul = ("matmul", "torch", "bf16", "")
    assert cov.cell(matmul, cuda).status == "ok" and (cov.cell(matmul, cuda).ok, cov.cell(matmul, cuda).total) == (2, 2)
    failed = cov.cell(matmul, rocm)
    assert (failed.status, failed.reason, failed.ok, failed.total) == ("failed", "HIP out of memory", 1, 2)
    assert cov.cell(("attention", "torch_sdpa", "bf16", "causal fwd"), rocm).status == "incorrect"
    assert cov.cell(("attention", "torch_sdpa", "bf16", "non-causal fwd_bwd"), rocm).status == "not run"
    assert cov.cell(("attention", "jax_cudnn", "bf16", "causal fwd"), rocm).reason == "needs an NVIDIA GPU"
    assert len(cov.suite) == 4
    assert cov.share(cuda) == pytest.approx(3 / 4) and cov.share(rocm) == 0.0


def test_variants_and_html():
    assert variant(typed(attention_row(64, True, "fwd_bwd"))) == "causal fwd_bwd"
    assert variant(typed(matmul_row(64, 64, 64))) == ""
    rows = _rows()
    rows[0] = {**rows[0], "backend": "<b>x</b>"}
    html = render_html(_matrix(rows))
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert "failed (1/2 ok): HIP out of memory" in html and "<b>80%</b> (4 of 5)" in html
