"""The suite's verdict page opens as the fleet's does (issue 43 item 2.4): the verdict, one table of headline figures
with their bands, then the findings; a reason many figures share ("no public reference (the device is not a
peak-table entry)") said once, naming them; a figure above 100% of the achievable peak flagged, never a plain
percentage."""

from __future__ import annotations

import re
from html import escape

import pytest

from tests.results.rows import ci95, valid_row
from tests.results.suite_pages import no_plots, write_node
from tests.results.test_verdict import FLOPS, _bundle, _mm
from xmfu.harness.suites import suite_report

REASON = "no public reference (the device is not a peak-table entry)"
MAMF_CASE = "matmul-bf16-8192x8192x4096-NN"


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    """The plots take seconds and are drawn by test_verdict's tests; these read the first screen."""
    no_plots(monkeypatch)


def _train(backend):
    median = FLOPS / 400e12
    return ci95(valid_row([median * 0.99, median, median * 1.01], flops=FLOPS, peak=989.0, workload="transformer",
                          backend=backend, dtype="bf16", case_id="transformer-bf16-8b-b1-s2048", platform="cuda",
                          device="NVIDIA H100", params={"name": "8b", "seq_len": 2048},
                          throughput={"tokens_per_s": 1000.0}))


def _suite(root, achievable_tflops):
    """One node whose device is no peak-table entry (rows without peak_entry): a mamf part that found
    `achievable_tflops` beside a 700 TFLOP/s matmul, and two training backends."""
    folder = root / "node-a"
    folder.mkdir(parents=True)
    achievable = {"tflops": achievable_tflops, "source": "mamf sweep in this run", "dtype": "bf16",
                  "backend": "torch", "case_id": MAMF_CASE, "method": "flushed"}
    mamf = {**_mm(achievable_tflops), "case_id": MAMF_CASE}
    parts = [{"name": "mamf", "kind": "run", "what": "mamf", "exit_code": 0, "seconds": 1.0, "note": "",
              "bundles": [_bundle(folder, "node-a-mamf", [mamf, _mm(700.0)], achievable=achievable)]},
             {"name": "training", "kind": "run", "what": "training", "exit_code": 0, "seconds": 1.0, "note": "",
              "bundles": [_bundle(folder, "node-a-train", [_train("torch"), _train("torch_compile")])]}]
    write_node(folder, parts)
    return root


def _first_screen(html):
    """The verdict section up to its plot and the tables below: the headline table, findings and notes."""
    return html.split("Verdict</h2>", 1)[1].split("<h3>Collectives against the link</h3>", 1)[0]


def test_the_first_screen_is_the_verdict_then_one_headline_table_then_the_findings(tmp_path):
    html, _ = suite_report.build(_suite(tmp_path, 720.0), price=None)
    body = html.split("<body>", 1)[1]
    assert body.startswith('<p class="judgement"><b>')
    screen = _first_screen(html)
    assert screen.count("<table>") == 1 and "<h3>Headline figures</h3><table>" in screen
    assert screen.index("Headline figures") < screen.index("<h3>Findings</h3>") < screen.index("<h3>Notes</h3>")
    assert "<td>achievable 720 (mamf)</td><td>100.0%</td>" in screen  # the best matmul (mamf's) against it


def test_a_reason_many_figures_share_is_said_once_naming_them(tmp_path):
    html, v = suite_report.build(_suite(tmp_path, 720.0), price=None)
    shared = [r for r in v["references"] if r.source == REASON]
    assert [r.figure for r in shared] == [
        "achievable matmul bf16 (mamf)", "training torch transformer-bf16-8b-b1-s2048 tokens/s per device",
        "training torch_compile transformer-bf16-8b-b1-s2048 tokens/s per device"]
    assert html.count(escape(REASON)) == 1
    (line,) = [h for h in v["headlines"] if REASON in h]
    assert line == f"reference: {REASON}: 3 figures: " + "; ".join(f"node-a: {r.figure}" for r in shared)
    screen = _first_screen(html)
    said = re.search(rf"<li>{re.escape(escape(REASON))}: 3 figures: <small>(.*?)</small></li>", screen).group(1)
    assert said == escape("; ".join(f"node-a: {r.figure}" for r in shared))
    # a reason one figure alone has is said for it, as before
    assert (f"reference: node-a: best matmul bf16 (torch, {MAMF_CASE}): no public reference for a matmul at one "
            "shape") in v["headlines"]


def test_a_figure_above_the_achievable_is_flagged_never_a_plain_percentage(tmp_path):
    html, v = suite_report.build(_suite(tmp_path, 35.0), price=None)  # the best matmul, 700, is 2000% of it
    head = v["headlines"][0]
    assert "2000.0% of the achievable 35 (mamf, " in head and f"[{suite_report.ABOVE}]" in head
    shown = [m.end() for m in re.finditer(re.escape("2000.0%"), html)]
    assert shown and all(html[i:].startswith(f" [{escape(suite_report.ABOVE)}]") or html[i:].startswith(
        " of the achievable") for i in shown)
    findings = _first_screen(html).split("<h3>Findings</h3>", 1)[1].split("<h3>Notes</h3>", 1)[0]
    assert '<li class="bad">node-a: best matmul bf16' in findings
    assert f"is 2000.0% of the achievable 35 (mamf): {escape(suite_report.ABOVE)}" in findings
    assert v["problems"] == []  # a ceiling that does not hold is to be read, not a fault of the hardware
    assert suite_report.flagged(v) and not suite_report.flagged(
        suite_report.build(_suite(tmp_path / "ok", 720.0), price=None)[1])
