"""Inference rows in the result tools: cost per million prompt / generated tokens, and the report's series."""

from __future__ import annotations

import pytest

from tests.results.rows import untimed_row, valid_row
from xmfu.harness.results.analysis.cost import cost_figures, usd_per_million
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.plots.inference_figures import inference_series
from xmfu.harness.results.schema.row import Row


def _priced(tflops: float, **throughput: float) -> Row:
    """A timed row at `tflops` with these work rates (per second), as the cost figures read it."""
    return typed(valid_row(tflops=tflops, throughput=throughput))


def test_cost_per_million_prompt_and_generated_tokens():
    prefill = _priced(100.0, prompt_tokens_per_s=50_000.0)
    decode = _priced(2.0, generated_tokens_per_s=2_000.0, generated_tokens_per_sequence_per_s=62.5)
    p, d = cost_figures(prefill, 3.6), cost_figures(decode, 3.6)
    # 3.6 USD/h buys 50,000 · 3,600 = 180 M prompt tokens: 0.02 USD per million; 7.2 M generated tokens: 0.5 USD
    assert p["usd_per_million_prompt_tokens"] == pytest.approx(0.02) and "usd_per_million_generated_tokens" not in p
    assert d["usd_per_million_generated_tokens"] == pytest.approx(0.5) and "usd_per_million_prompt_tokens" not in d
    assert p["usd_per_million_tokens"] is None and d["usd_per_million_tokens"] is None  # not training tokens
    assert d["usd_per_realized_pflop_hour"] == pytest.approx(3.6 / 0.002)
    train = cost_figures(_priced(400.0, tokens_per_s=10_000.0), 3.6)
    assert set(train) == {"price_per_device_hour", "usd_per_million_tokens", "usd_per_realized_pflop_hour"}
    assert cost_figures(decode, None) == {}
    assert usd_per_million(1.0, None) is None and usd_per_million(1.0, 0.0) is None  # no rate: no cost


def _row(backend, batch, tokens_per_s, mbu, phase="decode", status="ok", device="NVIDIA H100 80GB HBM3", **fields):
    """A decode (or prefill) row of the 1b model at `batch`: its generated tokens/s and MBU; timed when ok."""
    fields = {"peak": 100.0, "workload": "inference", "backend": backend, "device": device, "dtype": "bf16", "mbu": mbu,
              "throughput": {"generated_tokens_per_s": tokens_per_s},
              "params": {"phase": phase, "name": "1b", "batch": batch, "prompt_len": 512, "gen_len": 128}, **fields}
    return typed(valid_row(**fields) if status == "ok" else untimed_row(status, **fields))


def test_series_of_decode_throughput_and_mbu_against_batch():
    rows = [_row("torch", 8, 800.0, 0.5), _row("torch", 1, 120.0, 0.6), _row("jax", 1, 130.0, None),
            _row("torch", 4, 1.0, 0.1, phase="prefill"), _row("torch", 2, 1.0, 0.1, status="failed"),
            typed(valid_row(workload="matmul", params={}))]
    series = {(s["metric"], s["backend"]): s for s in inference_series(rows)}
    assert set(series) == {("decode_tokens_per_s", "torch"), ("mbu", "torch"), ("decode_tokens_per_s", "jax")}
    torch_tps = series[("decode_tokens_per_s", "torch")]
    assert torch_tps["points"] == [[1, 120.0], [8, 800.0]] and torch_tps["x_label"] == "batch"
    assert series[("mbu", "torch")]["points"] == [[1, 0.6], [8, 0.5]]
    assert torch_tps | {"points": None} == torch_tps | {
        "device": "NVIDIA H100 80GB HBM3", "dtype": "bf16", "model": "1b", "prompt_len": 512, "gen_len": 128,
        "points": None}
    assert "torch" in torch_tps["label"] and "1b" in torch_tps["label"]
    other = inference_series([_row("torch", 1, 100.0, 0.4, device="AMD Instinct MI300X"), *rows])
    assert len([s for s in other if s["metric"] == "mbu"]) == 2  # one series per device


def test_the_decode_plot_counts_the_flags_of_the_rows_it_draws():
    """Issue 30, item 7: a flagged decode row's flag is said under the plot that draws it."""
    from xmfu.harness.results.plots.inference_plot import inference

    rows = [_row("torch", 1, 120.0, 0.6), _row("torch", 8, 800.0, 0.5, contention={"contended": True})]
    assert "Drawn: 1 of 2 rows flagged: contended 1" in inference(rows)
