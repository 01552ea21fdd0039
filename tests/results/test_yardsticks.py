"""Headline figures against their public references (issue 28 item 2): the matching reference, the ratio with its
CI, the band and the source on the verdict page; a figure far below its reference fails the suite; `xmfu compare
--references` prints the same; a figure with no matching reference says so."""

from __future__ import annotations

import csv
import io
import json

import pytest

from tests.results.rows import ci95, valid_row
from tests.results.suite_pages import no_plots, write_node
from tests.results.test_verdict import FLOPS, _bundle, _mm
from xmfu.harness.cli.main import COMMANDS
from xmfu.harness.machine.references import Bands
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.suites import suite_report, yardsticks

H100 = {"peak_entry": "nvidia-h100-sxm"}
MAMF_CASE = "matmul-bf16-8192x8192x4096-NN"


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    """The plots take seconds and are drawn by test_verdict's tests; these need the tables."""
    no_plots(monkeypatch)


def _suite(root, achievable_tflops, train_params=None):
    """One node whose mamf part found `achievable_tflops` on an H100 SXM (a bundle fixture, as test_verdict's)."""
    folder = root / "node-a"
    mamf_row = {**_mm(achievable_tflops, **H100), "case_id": MAMF_CASE}
    achievable = {"tflops": mamf_row["tflops"], "source": "mamf sweep in this run", "dtype": "bf16",
                  "backend": "torch", "case_id": MAMF_CASE, "method": "flushed"}
    median = FLOPS / 400e12
    train = ci95(valid_row([median * 0.99, median, median * 1.01], flops=FLOPS, peak=989.0, workload="transformer",
                           backend="torch", dtype="bf16", case_id="transformer-bf16-8b-b1-s2048", platform="cuda",
                           device="NVIDIA H100 80GB HBM3", params=train_params or {"name": "8b", "seq_len": 2048},
                           throughput={"tokens_per_s": 1000.0}, **H100))
    parts = [{"name": "mamf", "kind": "run", "what": "mamf", "exit_code": 0, "seconds": 1.0, "note": "",
              "bundles": [_bundle(folder, "node-a-mamf", [mamf_row, _mm(500.0, **H100)], achievable=achievable)]},
             {"name": "training", "kind": "run", "what": "training", "exit_code": 0, "seconds": 1.0, "note": "",
              "bundles": [_bundle(folder, "node-a-train", [train])]}]
    write_node(folder, parts)
    return root


def test_the_verdict_page_shows_reference_ratio_ci_band_and_source(tmp_path):
    html, v = suite_report.build(_suite(tmp_path, 720.0), price=None)
    by = {r.figure: r for r in v["references"]}
    mamf = by["achievable matmul bf16 (mamf)"]
    assert mamf.reference_id == "mamf-nvidia-h100-sxm-bf16" and mamf.reference == 794.5
    assert mamf.ratio == pytest.approx(720 / 794.5, rel=1e-6) and mamf.band == "low"
    lo, hi = mamf.ratio_ci95
    assert lo < mamf.ratio < hi  # the figure's own CI over the reference
    assert mamf.source.startswith("https://github.com/stas00/ml-engineering/")
    # near matches are not used: the 8b model at 2048 tokens on one device is not Megatron's 8192 on 8
    train = next(r for r in v["references"] if r.figure.startswith("training"))
    assert train.band == "no public reference" and train.source == (
        "no public reference for nvidia-h100-sxm, model 8b, seq_len 2048, dtype bf16, world_size 1, nodes 1")
    best = next(r for r in v["references"] if r.figure.startswith("best matmul"))
    assert best.source == "no public reference for a matmul at one shape"
    assert any(h.startswith("reference: node-a: achievable matmul bf16 (mamf) 720 = 90.6% (95% CI ")
               and h.endswith("of the public reference 794.5 (mamf-nvidia-h100-sxm-bf16): low; source "
                              "https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md"
                              "#maximum-achievable-matmul-flops-comparison-table (read 2026-11-26)")
               for h in v["headlines"])
    assert "<h3>Headline figures</h3>" in html and "<td>mamf-nvidia-h100-sxm-bf16" not in html
    assert "<td>794.5 (mamf-nvidia-h100-sxm-bf16)</td><td>90.6%</td>" in html
    assert v["judgement"]["verdict"] == "PASS"  # low is shown, not a finding


def test_a_figure_far_below_its_reference_fails_the_suite(tmp_path):
    html, v = suite_report.build(_suite(tmp_path, 600.0), price=None)
    (problem,) = [p for p in v["problems"] if "public reference" in p]
    assert problem.startswith("node-a: achievable matmul bf16 (mamf) 600 is 75.5% (95% CI ")
    assert "of the public reference 794.5 TFLOP/s (mamf-nvidia-h100-sxm-bf16): far below (source https://" in problem
    assert v["judgement"]["verdict"] == "FAIL" and v["judgement"]["reasons"][0] == problem
    assert "<tr class=bad><td>node-a</td><td>achievable matmul bf16 (mamf)</td>" in html
    # the bands are configurable: at 0.7 / 0.5 the same figure is within
    _, v = suite_report.build(tmp_path, price=None, bands=Bands(0.7, 0.5))
    assert next(r for r in v["references"] if "mamf" in r.figure).band == "within"
    assert v["judgement"]["verdict"] == "PASS"


def test_the_suite_exit_status_counts_a_figure_far_below_as_a_finding():
    from xmfu.harness.suites.suite import exit_status

    assert exit_status("FAIL", False) == 1


def test_a_training_figure_matching_every_condition_is_compared(tmp_path):
    params = {"name": "8b", "seq_len": 8192, "world_size": 8}
    rows = yardsticks.of_node("n", {"training": [{"backend": "torch", "case_id": "c", "tokens_per_s": 13000.0,
                                                  "tokens_per_s_ci95": [12900.0, 13100.0], "dtype": "fp8",
                                                  "device_id": "nvidia-h100-sxm", "model": params["name"],
                                                  "seq_len": 8192, "world_size": 8}]}, 1, Bands())
    r, energy = rows  # tokens/s, then the step's J/token (not measured here: the figure gives none)
    assert energy.figure == "training torch c J/token"
    assert energy.value is None and energy.source == "not measured: no energy recorded"
    assert r.reference_id == "megatron-bridge-25.11-dgx-h100-llama3-8b-fp8cs"
    assert r.ratio == pytest.approx(13000 / 14451) and r.band == "low"
    # the same on two nodes, or with the node count unknown (a loose bundle), is not compared
    assert yardsticks.of_node("n", {"training": [{"backend": "t", "case_id": "c", "tokens_per_s": 1.0,
                                                  "model": "8b", "dtype": "fp8", "world_size": 8, "seq_len": 8192,
                                                  "device_id": "nvidia-h100-sxm"}]}, None, Bands())[0].band == (
        "no public reference")


def test_compare_references_prints_the_same_in_every_format(tmp_path, capsys):
    root = _suite(tmp_path, 600.0)
    bundle = str(root / "node-a" / "node-a-mamf")
    assert not load_bundle(bundle).problems
    assert COMMANDS["compare"](["--references", bundle]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["node", "figure", "value", "unit", "reference", "ratio", "ratio_ci95",
                                           "band", "source"]
    assert "794.5 (mamf-nvidia-h100-sxm-bf16)  75.5%" in out and "far below" in out
    assert COMMANDS["compare"](["--references", bundle, "--format", "csv"]) == 0
    table = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert table[0][0] == "node" and any(r[7] == "far below" and r[8].startswith("https://") for r in table[1:])
    assert COMMANDS["compare"](["--references", bundle, "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any(r["reference_id"] == "mamf-nvidia-h100-sxm-bf16" for r in data)
    assert COMMANDS["compare"](["--references", bundle, "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("| node | figure | value |")
    assert COMMANDS["compare"](["--references"]) == 2
    assert "needs at least one bundle" in capsys.readouterr().err
    assert COMMANDS["compare"](["--references", str(tmp_path / "nope")]) == 2


def test_xmfu_report_shows_the_references_first(tmp_path):
    root = _suite(tmp_path, 600.0)
    out = tmp_path / "r.html"
    assert COMMANDS["report"]([str(root / "node-a" / "node-a-mamf"), "-o", str(out)]) == 0
    page = out.read_text()
    assert page.index("Public references") < page.index("What runs on day one")
    assert "<td>794.5 (mamf-nvidia-h100-sxm-bf16)</td><td>75.5%</td>" in page and "<td>far below</td>" in page


MI355X = {"peak_entry": "amd-mi355x"}
AITER_FWD = "aiter-3390-mi355x-fwd-bf16-b4-h64kv8-s8192-d128-causal"
AITER_BWD = "aiter-815-mi355x-bwd-bf16-b8-h64kv8-s8192-d128-causal"


def _attention(tflops, mode="fwd", batch=4, backend="torch_sdpa", convention="exact"):
    """An MI355X attention row at aiter's shape (h 64, kv 8, s 8192, d 128, causal), `tflops` under `convention`
    (the FLOPs as AttentionCase.flops counts them)."""
    s = 8192
    scores = s * (s + 1) / 2 if convention == "exact" else s * s / 2
    flops = 4.0 * batch * 64 * 128 * scores * {"fwd": 1.0, "bwd": 2.5}[mode]
    median = flops / (tflops * 1e12)
    params = {"batch": batch, "heads": 64, "kv_heads": 8, "seq_q": s, "seq_kv": s, "head_dim": 128, "causal": True,
              "alignment": "top_left", "scale": 128 ** -0.5, "mode": mode}
    case = f"attention-bf16-{mode}-b{batch}-h64kv8-q{s}-k{s}-d128-causal-top_left"
    return ci95(valid_row([median * 0.99, median, median * 1.01], flops=flops, peak=2516.6, workload="attention",
                          backend=backend, dtype="bf16", case_id=case, platform="rocm", device="AMD Instinct MI355X",
                          params=params, flop_convention=convention, **MI355X))


def _attention_bundle(tmp_path, convention="exact"):
    """fwd: the fastest at aiter's shape is torch_sdpa at 1200 (triton 1100); the fwd headline is a batch-2 case
    (no reference at that shape). bwd: the headline is at PR #815's shape, 800."""
    from tests.results.rows import write_bundle

    rows = [_attention(1200.0, convention=convention), _attention(1100.0, backend="triton", convention=convention),
            _attention(1300.0, batch=2, convention=convention),
            _attention(800.0, mode="bwd", batch=8, convention=convention)]
    write_bundle(tmp_path, "mi355x-attention", rows)
    return tmp_path / "mi355x-attention"


def test_attention_at_a_referenced_shape_is_judged_against_it(tmp_path):
    rows = yardsticks.of_bundles([load_bundle(_attention_bundle(tmp_path)).bundle], Bands())
    by = {r.figure: r for r in rows}
    assert list(by) == ["attention bwd (torch_sdpa, attention-bf16-bwd-b8-h64kv8-q8192-k8192-d128-causal-top_left)",
                        "attention fwd (torch_sdpa, attention-bf16-fwd-b2-h64kv8-q8192-k8192-d128-causal-top_left)",
                        "attention fwd at bf16 b4 h64/kv8 s8192 d128 causal (torch_sdpa)"]
    bwd, head, at = by.values()
    # the bwd headline's own shape is PR #815's: judged against it under xmfu's exact count (1052.6, not 2105)
    assert bwd.reference_id == AITER_BWD and bwd.reference == 1052.6 and bwd.band == "far below"
    assert bwd.ratio == pytest.approx(800 / 1052.6) and bwd.source == (
        "https://github.com/ROCm/aiter/pull/815 (read 2026-11-26)")
    # the fwd headline (batch 2) is one dimension off: no near match
    assert head.band == "no public reference" and head.source.startswith(
        "no public reference for amd-mi355x, mode fwd, dtype bf16, batch 2, heads 64, kv_heads 8, seq_len 8192")
    # the fastest backend at exactly PR #3390's shape, with its CI
    assert at.reference_id == AITER_FWD and at.reference == 1278.2 and at.band == "low"
    assert at.value == pytest.approx(1200.0) and at.ratio == pytest.approx(1200 / 1278.2)
    lo, hi = at.ratio_ci95
    assert lo < at.ratio < hi and at.source == "https://github.com/ROCm/aiter/pull/3390 (read 2026-11-26)"
    assert yardsticks.problems(rows) == [
        f"bundles: {bwd.figure} 800 is 76.0% (95% CI {100 * bwd.ratio_ci95[0]:.1f}-"
        f"{100 * bwd.ratio_ci95[1]:.1f}%) of the public reference 1052.6 TFLOP/s ({AITER_BWD}): far below "
        "(source https://github.com/ROCm/aiter/pull/815 (read 2026-11-26))"]


def test_an_attention_row_under_fa2_is_judged_against_the_reference_under_fa2(tmp_path):
    rows = yardsticks.of_bundles([load_bundle(_attention_bundle(tmp_path, "fa2")).bundle], Bands())
    at = next(r for r in rows if r.reference_id == AITER_FWD)
    assert at.reference == 1278 and at.ratio == pytest.approx(1200 / 1278)
    assert next(r for r in rows if r.reference_id == AITER_BWD).reference == 1052.5


def test_compare_references_prints_the_attention_reference(tmp_path, capsys):
    bundle = str(_attention_bundle(tmp_path))
    assert COMMANDS["compare"](["--references", bundle]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "attention fwd at bf16 b4 h64/kv8 s8192 d128 causal" in x)
    assert f"1278.2 ({AITER_FWD})  93.9%" in line and "low" in line
    assert "https://github.com/ROCm/aiter/pull/3390" in line
    bwd = next(x for x in out.splitlines() if f"1052.6 ({AITER_BWD})" in x)
    assert bwd.split(f"({AITER_BWD})")[1].split()[:3] == ["76.0%", "75.2-76.8%", "far"]


def test_the_verdict_page_shows_the_attention_reference(tmp_path):
    folder = tmp_path / "node-a"
    folder.mkdir()
    b = _attention_bundle(folder)
    parts = [{"name": "attention", "kind": "run", "what": "attention", "exit_code": 0, "seconds": 1.0, "note": "",
              "bundles": [f"node-a/{b.name}"]}]
    record = {"host": "node-a", "scale": "full", "scale_reason": "full sizes", "doctor": None, "parts": parts,
              "started": "2026-11-24T00:00:00Z", "finished": "2026-11-24T01:00:00Z",
              "platform": {"kind": "rocm", "reason": "test", "devices": []},
              "suite": {"name": "acceptance", "version": 1, "definition_sha": "d", "suite_id": "s"}}
    (folder / "node.json").write_text(json.dumps(record))
    html, v = suite_report.build(tmp_path, price=None)
    at = next(r for r in v["references"] if r.reference_id == AITER_FWD)
    assert at.node == "node-a" and at.band == "low"
    assert f"<td>1278.2 ({AITER_FWD})</td><td>93.9%</td>" in html
    assert any(h.startswith("reference: node-a: attention fwd at bf16 b4 h64/kv8 s8192 d128 causal (torch_sdpa) "
                            "1200 = 93.9% (95% CI ") for h in v["headlines"])
    assert v["judgement"]["verdict"] == "FAIL"  # the bwd figure is far below PR #815's
