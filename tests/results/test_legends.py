"""Chart legends keep every label whole: long labels wrap at word boundaries, never cut (issue 30 item 11)."""

from __future__ import annotations

from datetime import date

import pytest

from tests.results.rows import valid_row
from xmfu.harness.results.analysis import grouping
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.history import trend
from xmfu.harness.results.plots import figures, inference_plot, report_plots

pytest.importorskip("matplotlib")

BACKENDS = ("torch_compile_max_autotune", "jax_shard_map_with_remat")
DEVICES = ("NVIDIA H100 80GB HBM3 SXM5", "AMD Instinct MI300X OAM 192GB")
PARALLEL = ("ddp-gradient-bucketing", "fsdp-full-shard-with-cpu-offload")


def _legend_texts(fig) -> list[str]:
    """Every legend entry of the figure as it reads (its lines joined by a space)."""
    return [" ".join(t.get_text().split()) for ax in fig.axes if ax.get_legend()
            for t in ax.get_legend().get_texts()]


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plotting modules hand to figures.svg, kept for their legends."""
    kept = []
    monkeypatch.setattr(figures, "svg", lambda fig, name: kept.append(fig) or "")
    return kept


def test_the_throughput_legend_names_every_backend_and_strategy_whole(drawn):
    rows = [typed(valid_row([s * 1e-3] * 3, flops=f, workload="transformer", backend=b, dtype="bf16", device=d,
                            case_id=f"transformer-bf16-llama-3-8b-instruct-seq4096-{p}-b{f:g}",
                            params={"model": "llama-3-8b-instruct-reference-config", "parallel": p, "batch": f}))
            for b in BACKENDS for p in PARALLEL for d in DEVICES for s, f in ((1, 1e9), (2, 2e9))]
    report_plots.throughput(rows)
    texts = _legend_texts(drawn[0])
    labels = list(grouping.series(rows, lambda r: r.flops))
    assert max(len(x) for x in labels) > 70  # long enough that the old 60-character cut hid its ends
    assert sorted(texts) == sorted(" ".join(x.split()) for x in labels)
    assert all(b in " ".join(texts) for b in (*BACKENDS, *PARALLEL, *DEVICES)) and "…" not in " ".join(texts)


def test_the_inference_legend_keeps_each_series_label_whole(drawn):
    label = "torch_compile_max_autotune llama-3-8b-instruct on NVIDIA H100 80GB HBM3 (bf16, prompt 2048, 512 tokens)"
    series = [{"metric": "decode_tokens_per_s", "y_label": "decode tokens/s", "label": label,
               "points": [[1, 100.0], [8, 700.0]]}]
    inference_plot._figure(series, "inference-0")
    assert _legend_texts(drawn[0]) == [label]


def test_the_trend_legend_keeps_each_series_label_whole():
    label = "transformer llama-3-8b-instruct-seq4096-fsdp-full-shard-with-cpu-offload jax_shard_map_with_remat bf16"
    fig = trend.figure({"transformer": {label: [(date(2026, 11, 1), 0.41), (date(2026, 11, 2), 0.42)]}}, "MFU",
                       "MFU")
    assert _legend_texts(fig) == [label]


@pytest.mark.parametrize("text,width", [("a" * 50 + " fsdp", 40), ("short", 40), ("ddp-weak torch", 5)])
def test_a_label_wraps_between_words_and_keeps_every_character(text, width):
    wrapped = figures.label(text, width)
    assert wrapped.replace("\n", " ") == text
    assert all(len(line) <= width or " " not in line for line in wrapped.splitlines())
