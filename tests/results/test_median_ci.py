"""Issue 42 item 17: a row's CI of the median is the binomial order-statistic interval (exact, distribution-free, no
resampling), recorded in time_s.ci_method and re-derived exactly by `xmfu validate`; the bundles written before
(a 500-1,000-resample seeded bootstrap, "bootstrap of the median" or no method at all) are re-derived by their own
method and still validate. The coverage simulation over n = 5..500 is benchmarks/median_ci_coverage.py; its
trials-marked run here checks the code against the exact coverage."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from xmfu.harness.results.rederive import times
from xmfu.harness.results.statistics.summary import (
    CI_BINOMIAL,
    CI_BOOTSTRAP,
    binomial_rank,
    bootstrap_median_ci,
    summarize,
    summarize_many,
)

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = times.Settings(resamples=500)


def _samples(n: int, seed: int = 3) -> list[float]:
    return [float(v) for v in np.random.default_rng(seed).lognormal(-3.4, 0.1, n)]


def test_the_ci_of_24_samples_is_their_7th_and_18th_order_statistics():
    """At n = 24 the 500-resample bootstrap's upper bound sat at quantile 0.92-0.94 of the bootstrap distribution;
    the binomial interval is [x_(7), x_(18)], 1 - 2 P(B <= 6) = 97.7% coverage, whatever the order of the
    samples and with no seed."""
    x = _samples(24)
    s = summarize(x, 500)
    ordered = sorted(x)
    assert (s.ci95_low, s.ci95_high) == (ordered[6], ordered[17])
    assert s.ci_method == CI_BINOMIAL
    assert summarize(list(reversed(x)), 500) == s
    assert (s.ci95_low, s.ci95_high) != bootstrap_median_ci(x, 500)


def test_the_binomial_interval_covers_the_median_at_least_95_percent_from_6_samples():
    """Its exact coverage, 1 - 2 P(B <= r - 1) with B ~ Binomial(n, 1/2) (Conover, section 3.2), n = 6..500; below
    6 samples the range, 1 - 2^(1-n) (93.75% at 5)."""
    for n in range(6, 501):
        r = binomial_rank(n)
        coverage = 1 - 2 * sum(math.comb(n, k) for k in range(r)) / 2 ** n
        assert coverage >= 0.95, n
        assert 1 - 2 * sum(math.comb(n, k) for k in range(r + 1)) / 2 ** n < 0.95, n  # the narrowest that does
    assert [binomial_rank(n) for n in range(1, 6)] == [0] * 5


@pytest.mark.parametrize("method", [CI_BINOMIAL, CI_BOOTSTRAP, ""])
def test_summarize_many_gives_summarize_by_either_method(method):
    batch = [_samples(n, seed) for n in (1, 2, 5, 24, 24, 101) for seed in (1, 2)]
    assert summarize_many(batch, 200, method) == [summarize(x, 200, None, method) for x in batch]


def _stated(values: list[float], method: str | None) -> dict:
    t = summarize(values, SETTINGS.resamples, None, method or "").as_dict()
    if method is None:
        del t["ci_method"]  # rows written before the method was recorded
    return t


@pytest.mark.parametrize("method", [CI_BOOTSTRAP, None])
def test_a_bundle_written_before_keeps_its_bootstrap_interval_and_validates(method):
    values = _samples(24)
    assert times.stats_problems(_stated(values, method), values, None, SETTINGS, "line 1", "time_s", "s") == []


def test_a_new_row_whose_interval_is_narrowed_by_one_order_statistic_is_refused():
    """The seeded bootstrap's bounds (once accepted as the run's own draw) under the binomial method, or the
    interval moved one order statistic inward: refused, exactly."""
    values = _samples(24)
    t = _stated(values, CI_BINOMIAL)
    ordered = sorted(values)
    for low, high in (bootstrap_median_ci(values, 500), (ordered[7], ordered[16])):
        forged = {**t, "ci95_low": low, "ci95_high": high}
        problems = times.stats_problems(forged, values, None, SETTINGS, "line 1", "time_s", "s")
        assert any("time_s.ci95_high" in p and "binomial order-statistic bound" in p for p in problems), problems


def test_a_stated_method_must_be_the_one_the_samples_give():
    values = _samples(24)
    t = {**_stated(values, CI_BINOMIAL), "ci_method": "bca bootstrap"}
    problems = times.stats_problems(t, values, None, SETTINGS, "line 1", "time_s", "s")
    assert any("ci_method 'bca bootstrap'" in p for p in problems), problems


def test_the_committed_reference_bundles_still_validate():
    from xmfu.harness.cli.formulas import restate_rows, restate_run
    from xmfu.harness.results.bundle.validator import load_bundle

    folder = ROOT / "results" / "reference" / "cpu-amd-epyc-2core" / "20261121T200902Z-matmul-bf16-4703bf"
    loaded = load_bundle(folder, restate_rows, restate_run)
    assert loaded.problems == []
    assert all("ci_method" not in r["time_s"] for r in loaded.bundle.raw_rows)


def _coverage_script():
    spec = importlib.util.spec_from_file_location("median_ci_coverage", ROOT / "benchmarks" / "median_ci_coverage.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["median_ci_coverage"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.trials
def test_simulated_coverage_matches_the_exact_coverage_from_5_to_500_samples():
    """benchmarks/median_ci_coverage.py at 4,000 sample sets per (distribution, n): each simulated coverage within
    4 Monte Carlo standard errors of the exact one, so at least 95% less that error from n = 6 on, whatever the
    distribution (ties included)."""
    script = _coverage_script()
    trials = 4000
    for row in script.coverage_table(trials, sizes=(5, 6, 7, 10, 24, 50, 100, 200, 500)):
        exact, simulated = row["exact"], row["binomial"]
        se = math.sqrt(exact * (1 - exact) / trials)
        if row["distribution"] == "quantized":  # ties: the closed interval covers at least as often
            assert simulated >= exact - 4 * se, row
        else:
            assert abs(simulated - exact) <= 4 * se, row
