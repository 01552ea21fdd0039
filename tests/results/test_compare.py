"""Comparison statistics with known answers, refusal of incomparable bundles, the environment diff, cost,
and the Python API example."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.results.rows import keyed, valid_row
from xmfu.harness.results.analysis.compare import Side, compare, environment_diff
from xmfu.harness.results.analysis.cost import break_even, cost_figures, parse_prices
from xmfu.harness.results.bundle.reader import read_bundle, typed
from xmfu.harness.results.bundle.writer import BundleWriter
from xmfu.harness.results.render.compare_render import render
from xmfu.harness.results.schema.row import Row
from xmfu.harness.results.statistics.summary import summarize

KEY_FIELDS = {"workload": "matmul", "params": {"m": 8}, "dtype": "bf16", "flop_convention": "matmul-2mnk/1",
              "protocol": {"protocol": "xmfu.timing/1", "statistic": "median", "cold_cache": False}}


def _bundle(tmp_path, name, median, fields=KEY_FIELDS, env=None, created="2026-11-23T00:00:00Z", spread=0.01,
            repeats=1, case_id="c", seed=None):
    """One row whose workload, params, dtype and convention are `fields`' and whose key is their hash (the
    runner's comparability.py), as `xmfu validate` re-derives it."""
    rng = np.random.default_rng(len(name) if seed is None else seed)
    samples = list(median * (1 + spread * rng.standard_normal(40 * repeats)))
    groups = [i // 40 for i in range(len(samples))]
    row = keyed(valid_row(samples, flops=1e12, peak=1000.0, run_id=name, case_id=case_id, platform="cuda",
                          device="GPU", workload=fields["workload"], dtype=fields["dtype"], params=fields["params"],
                          flop_convention=fields["flop_convention"], throughput={"tokens_per_s": 1e6 / median}),
                fields["protocol"])
    writer = BundleWriter(tmp_path / name, {"run_id": name, "created": created, "xmfu_version": "0", "git_sha": None,
                                            "argv": [], "overrides": [], "comparability_key": row["comparability_key"]},
                          "", env or {"driver": "570", "packages": {"torch": "2.13.0"}})
    row["time_s"] = summarize(samples, groups=groups).as_dict()  # as the engine states it: repeats two-stage
    row["tflops"] = row["flops"] / row["time_s"]["median"] / 1e12
    row["mfu"] = row["tflops"] / row["peak_tflops"]
    writer.append(row, {"case_id": case_id, "backend": "torch", "samples": samples, "repeats": groups})
    writer.finalize("complete")
    return read_bundle(tmp_path / name)


def _sides(*bundles):
    return [Side([b]) for b in bundles]


def _priced(tflops: float, **throughput: float) -> Row:
    """A timed row at `tflops` with these work rates (per second), as the cost figures read it."""
    return typed(valid_row(tflops=tflops, throughput=throughput))


def test_one_run_per_side_is_called_only_beyond_the_noise_floor(tmp_path):
    a, b = _bundle(tmp_path, "a", 2.0), _bundle(tmp_path, "b", 1.0)
    (row,) = compare(_sides(a, b)).rows
    assert row["speedup"] == pytest.approx(2.0, rel=0.02) and row["verdict"] == "faster"
    assert row["variance_source"].startswith("none (one run per side") and "noise floor" in row["verdict_reason"]
    close = _bundle(tmp_path, "close", 1.06)  # 6%: precise within the run, but under the 10% floor
    (row,) = compare(_sides(close, _bundle(tmp_path, "one", 1.0))).rows
    assert row["ci95_low"] > 1.02 and row["verdict"] == "inconclusive"
    assert row["verdict_reason"] == "one run per side: run-to-run noise unknown"
    result = compare(_sides(a, b))
    assert "speedup" in render(result, "table") and render(result, "csv").startswith("case_id,")
    assert json.loads(render(result, "json"))["rows"][0]["verdict"] == "faster"
    assert render(result, "markdown").startswith("| case_id")


def test_repeats_inside_each_bundle_give_the_interval_but_not_between_process_noise(tmp_path):
    a = _bundle(tmp_path, "a", 1.06, repeats=5)
    b = _bundle(tmp_path, "b", 1.0, repeats=5)
    (row,) = compare(_sides(a, b)).rows
    assert row["variance_source"] == "5 and 5 repeats/runs per side (Welch t; repeats share a process)"
    assert row["ci95_low"] > 1.02  # the repeats agree with each other...
    assert row["verdict"] == "inconclusive" and "noise floor" in row["verdict_reason"]  # ...but 6% < the 10% floor
    big = _bundle(tmp_path, "big", 1.5, repeats=5)
    assert compare(_sides(big, b)).rows[0]["verdict"] == "faster"


def test_several_bundles_per_side(tmp_path):
    side_a = Side([_bundle(tmp_path, f"a{i}", 1.0 * (1 + 0.05 * (i - 1)), seed=i) for i in range(3)])
    side_b = Side([_bundle(tmp_path, f"b{i}", 1.0 * (1 + 0.05 * (1 - i)), seed=10 + i) for i in range(3)])
    (row,) = compare([side_a, side_b]).rows
    assert row["run"] == "b0+b1+b2" and row["variance_source"].startswith("3 and 3 bundles per side")
    assert row["verdict"] == "inconclusive"  # runs that disagree by 5% cannot call a 0% difference equivalent
    steady = Side([_bundle(tmp_path, f"c{i}", 1.2 * (1 + 0.002 * i), seed=20 + i) for i in range(3)])
    assert compare([steady, side_b]).rows[0]["verdict"] == "faster"  # independent runs decide without a floor


def test_noise_from_history_replaces_the_floor(tmp_path):
    a, b = _bundle(tmp_path, "a", 1.06), _bundle(tmp_path, "b", 1.0)
    quiet = compare(_sides(a, b), noise=lambda row: (0.005, 8))
    (row,) = quiet.rows
    assert row["verdict"] == "faster" and row["variance_source"] == "history store: 8 recent runs, run-to-run sd 0.5%"
    (noisy,) = compare(_sides(a, b), noise=lambda row: (0.2, 8)).rows
    assert noisy["verdict"] == "inconclusive"


def test_noise_from_history_is_used_with_repeats_too(tmp_path):
    """Issue 30, item 15: with repeats=5 in each bundle the store's estimate was dropped without a word. A bundle is
    one run (its repeats share a process), so the store's between-run sd is its figure's sd; the repeats count only
    where they vary more (stats.runs_ratio_ci_store)."""
    a, b = _bundle(tmp_path, "a", 1.06, repeats=5), _bundle(tmp_path, "b", 1.0, repeats=5)
    (quiet,) = compare(_sides(a, b), noise=lambda row: (0.005, 8)).rows
    assert quiet["variance_source"].startswith("history store: 8 recent runs, run-to-run sd 0.5%")
    assert "5 repeats" in quiet["variance_source"]
    assert quiet["verdict"] == "faster" and "verdict_reason" not in quiet  # the store knows the between-run noise
    (noisy,) = compare(_sides(a, b), noise=lambda row: (0.2, 8)).rows
    assert noisy["verdict"] == "inconclusive" and noisy["ci95_low"] < 1 < noisy["ci95_high"]


def test_noise_from_history_is_pooled_with_several_bundles_per_side(tmp_path):
    side_a = Side([_bundle(tmp_path, f"a{i}", 1.0 * (1 + 0.05 * (i - 1)), seed=i) for i in range(3)])
    side_b = Side([_bundle(tmp_path, f"b{i}", 1.0 * (1 + 0.05 * (1 - i)), seed=10 + i) for i in range(3)])
    (alone,) = compare([side_a, side_b]).rows
    (row,) = compare([side_a, side_b], noise=lambda row: (0.005, 30)).rows
    assert "history store: 30 recent runs" in row["variance_source"] and "3 bundles" in row["variance_source"]
    # 29 store degrees of freedom at 0.5% pooled with the bundles' 2 at 5%: a narrower interval than theirs alone
    assert alone["ci95_high"] - alone["ci95_low"] > row["ci95_high"] - row["ci95_low"]


def test_noise_from_history_without_an_estimate_for_the_series_says_so(tmp_path):
    a, b = _bundle(tmp_path, "a", 1.06, repeats=5), _bundle(tmp_path, "b", 1.0, repeats=5)
    (row,) = compare(_sides(a, b), noise=lambda row: None).rows
    assert "history store" in row["variance_source"] and "too few runs" in row["variance_source"]


def test_nothing_in_common_is_said(tmp_path):
    a = _bundle(tmp_path, "a", 1.0)
    b = _bundle(tmp_path, "b", 1.0, case_id="attention-x")
    result = compare(_sides(a, b))
    assert not result.rows and "no (case id, backend) in common" in result.unmatched[0]


def test_incomparable_rows_are_refused_with_the_fields_that_differ(tmp_path):
    other = {**KEY_FIELDS, "dtype": "fp16", "protocol": {**KEY_FIELDS["protocol"], "cold_cache": True}}
    a, b = _bundle(tmp_path, "a", 1.0), _bundle(tmp_path, "b", 1.0, fields=other)
    result = compare(_sides(a, b))
    assert not result.rows and result.refused
    assert result.refused[0]["differs"] == ["dtype: 'bf16' vs 'fp16'", "protocol.cold_cache: False vs True"]
    allowed = compare(_sides(a, b), allow_incomparable=True)
    assert allowed.rows[0]["incomparable"] and "INCOMPARABLE" in render(allowed, "table")


def test_environment_diff_names_what_changed():
    envs = {"a": {"driver": "570", "packages": {"torch": "2.13.0", "jax": None}, "env": {"NCCL_ALGO": "Ring"},
                  "telemetry": {"power_limit_w": 700}},
            "b": {"driver": "575", "packages": {"torch": "2.13.0", "jax": "0.10.2"}, "env": {},
                  "telemetry": {"power_limit_w": 700}}}
    diff = {d["field"]: d for d in environment_diff(envs)}
    assert set(diff) == {"driver", "package jax", "env NCCL_ALGO"}
    assert diff["driver"]["a"] == "570" and diff["env NCCL_ALGO"]["b"] is None


def test_cost_per_token_and_break_even():
    c = cost_figures(_priced(400.0, tokens_per_s=10_000.0), 3.6)
    assert c["usd_per_million_tokens"] == pytest.approx(3.6 / 36_000_000 * 1e6)
    assert c["usd_per_realized_pflop_hour"] == pytest.approx(9.0)
    # 20% cheaper, 40% less throughput: 0.8 / 0.6 = 1.33x the cost per unit of work
    assert break_even(0.6, 0.8) == {"break_even_price_ratio": 0.6, "price_ratio": 0.8,
                                    "cost_per_work_ratio": pytest.approx(0.8 / 0.6)}
    assert parse_prices(["NVIDIA H100 80GB HBM3=2.5"]) == {"NVIDIA H100 80GB HBM3": 2.5}
    with pytest.raises(ValueError):
        parse_prices(["no-price"])


def test_prices_file(tmp_path):
    from xmfu.harness.results.analysis.cost import load_prices

    (tmp_path / "p.yaml").write_text("NVIDIA H100 80GB HBM3: 2.49\nAMD Instinct MI300X: 1.99\n")
    assert load_prices(str(tmp_path / "p.yaml")) == {"NVIDIA H100 80GB HBM3": 2.49, "AMD Instinct MI300X": 1.99}
    (tmp_path / "bad.yaml").write_text("GPU: free\n")
    with pytest.raises(ValueError):
        load_prices(str(tmp_path / "bad.yaml"))


def test_python_api_example(tmp_path):
    torch = pytest.importorskip("torch")
    import xmfu

    a, b = torch.rand(128, 128), torch.rand(128, 128)
    result = xmfu.benchmark({"matmul": lambda: a @ b, "einsum": lambda: torch.einsum("ik,kj->ij", a, b),
                             "transposed": lambda: a @ b.T},
                            reference=lambda: a.double() @ b.double(), flops=2 * 128**3, baseline="matmul",
                            tolerance=1e-5, results_dir=str(tmp_path), timing={"max_time_s": 1.0})
    rows = {r["backend"]: r for r in result.rows}
    assert rows["matmul"]["status"] == "ok" and rows["einsum"]["speedup"]["verdict"]
    assert rows["transposed"]["status"] == "incorrect"  # a wrong kernel is never timed
    assert rows["matmul"]["tflops"] > 0 and result.bundle.startswith(str(tmp_path))


def _contended_copy(tmp_path, bundle, name):
    """`bundle` written again as run `name`, its row marked contended by the run (as harness/machine/contention.py
    marks it)."""
    writer = BundleWriter(tmp_path / name, {**bundle.manifest, "run_id": name}, "", bundle.environment())
    for row, samples in zip(bundle.raw_rows, bundle.samples, strict=True):
        writer.append({**row, "run_id": name, "contention": {"contended": True, "reason": "load 3.2 on 2 cores"}},
                      samples)
    writer.finalize("complete")
    return read_bundle(tmp_path / name)


def test_a_verdict_on_a_contended_row_is_inconclusive_unless_strict(tmp_path):
    """The issue's pair: 'faster' at 1.67x beyond the noise floor, where one side was flagged contended."""
    a = _contended_copy(tmp_path, _bundle(tmp_path, "a", 1.67), "a-contended")
    b = _bundle(tmp_path, "b", 1.0)
    (row,) = compare(_sides(a, b)).rows
    assert row["verdict"] == "inconclusive" and row["verdict_reason"] == "contended"
    assert row["speedup"] == pytest.approx(1.67, rel=0.02)  # the figures stay, with the flag
    assert "inconclusive (contended)" in render(compare(_sides(a, b)), "table")
    (strict,) = compare(_sides(a, b), strict=True).rows
    assert strict["verdict"] == "faster" and strict["contended"]
    assert "faster (beyond the 10% noise floor) (CONTENDED)" in render(compare(_sides(a, b), strict=True), "table")


def test_price_for_a_device_no_row_has_is_named(tmp_path, capsys):
    from tests.results.rows import matmul_row, write_bundle
    from xmfu.harness.cli.main import main

    a, b = (write_bundle(tmp_path, name, [matmul_row(256, 256, 256)]) for name in ("a", "b"))
    assert main(["compare", str(a.folder), str(b.folder), "--price", "GPU B=2.0", "--price", "GPU A=1.0"]) == 0
    err = capsys.readouterr().err
    assert "no row has the device of 'GPU B'" in err and "The rows' devices: 'GPU A'" in err
    assert main(["compare", str(a.folder), str(b.folder), "--price", "GPU A=1.0"]) == 0
    assert capsys.readouterr().err == ""


def test_inference_cost_per_token_in_every_format():
    from xmfu.harness.results.analysis.compare import Comparison

    row = {"case_id": "inference-decode", "backend": "torch", "run": "b", "baseline_run": "a", "speedup": 1.0,
           "verdict": "same", "cost": cost_figures(_priced(2.0, generated_tokens_per_s=2e3), 3.6),
           "baseline_cost": cost_figures(_priced(2.0, generated_tokens_per_s=1e3), 3.6)}
    result = Comparison("a", rows=[row])
    for fmt in ("table", "csv", "markdown"):
        text = render(result, fmt)
        assert "usd_per_million_generated_tokens" in text and "baseline_usd_per_million_generated_tokens" in text
        assert "0.5" in text and "usd_per_million_prompt_tokens" not in text  # a decode row: no prompt tokens
