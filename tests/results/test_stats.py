from __future__ import annotations

import numpy as np
import pytest

from xmfu.harness.results.statistics.speedup import runs_ratio_ci_store
from xmfu.harness.results.statistics.summary import bootstrap_median_ci, summarize


def test_summary_of_known_samples():
    s = summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.n, s.median, s.mean, s.min, s.max) == (5, 3.0, 3.0, 1.0, 5.0)
    assert s.p10 == pytest.approx(1.4) and s.p90 == pytest.approx(4.6)
    assert s.cv == pytest.approx(np.std([1, 2, 3, 4, 5], ddof=1) / 3)
    assert s.ci95_low <= s.median <= s.ci95_high


def test_bootstrap_ci_is_deterministic_and_narrows_with_more_samples():
    rng = np.random.default_rng(0)
    few, many = rng.normal(1.0, 0.1, 20), rng.normal(1.0, 0.1, 2000)
    assert bootstrap_median_ci(few) == bootstrap_median_ci(few)
    lo_f, hi_f = bootstrap_median_ci(few)
    lo_m, hi_m = bootstrap_median_ci(many)
    assert hi_m - lo_m < hi_f - lo_f
    assert lo_m < 1.0 < hi_m


def test_single_sample_and_empty():
    s = summarize([2.0])
    assert s.ci95_low == s.ci95_high == 2.0 and s.cv == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_relative_ci_half_width():
    s = summarize([1.0] * 10)
    assert s.rel_ci_half_width == 0.0


def _rounds(values_per_round):
    samples = [v for r in values_per_round for v in r]
    rounds = [i for i, r in enumerate(values_per_round) for _ in r]
    return samples, rounds


def test_paired_speedup_verdicts():
    from xmfu.harness.results.statistics.speedup import paired_speedup

    rng = np.random.default_rng(1)
    base = _rounds([list(1.0 + 0.01 * rng.standard_normal(3)) for _ in range(20)])
    fast = _rounds([list(0.5 + 0.005 * rng.standard_normal(3)) for _ in range(20)])
    same = _rounds([list(1.0 + 0.002 * rng.standard_normal(3)) for _ in range(20)])
    slow = _rounds([list(1.5 + 0.01 * rng.standard_normal(3)) for _ in range(20)])
    s = paired_speedup("b", base, fast)
    assert s.verdict == "faster" and s.value == pytest.approx(2.0, rel=0.02) and s.ci95_low < s.value < s.ci95_high
    assert paired_speedup("b", base, same).verdict == "equivalent"
    assert paired_speedup("b", base, slow).verdict == "slower"
    noisy = _rounds([list(1.0 + 0.3 * rng.standard_normal(3)) for _ in range(4)])
    assert paired_speedup("b", base, noisy).verdict == "inconclusive"
    assert paired_speedup("b", base, ([1.0], [99])) is None  # no shared round: no paired figure


def test_paired_speedup_cancels_drift_shared_by_a_round():
    from xmfu.harness.results.statistics.speedup import paired_speedup

    drift = [1.0 + 0.5 * i for i in range(10)]  # both contenders slow down together, round by round
    base = _rounds([[d, d] for d in drift])
    cand = _rounds([[d / 1.25, d / 1.25] for d in drift])
    s = paired_speedup("b", base, cand)
    assert s.value == pytest.approx(1.25) and s.verdict == "faster"


def test_binomial_median_ci_has_exact_coverage_and_needs_six_samples():
    from xmfu.harness.results.statistics.summary import median_ci_binomial

    x = list(range(1, 101))  # n = 100: the 95% interval is [x_(40), x_(61)] (Conover, table A3)
    assert median_ci_binomial(x) == (40.0, 61.0)
    assert median_ci_binomial([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few for 95%: the whole range
    rng = np.random.default_rng(5)
    covered = 0
    for _ in range(2000):
        low, high = median_ci_binomial(rng.exponential(1.0, 25))
        covered += low <= np.log(2) <= high
    assert 0.94 <= covered / 2000 <= 0.99  # the true median of Exp(1) is ln 2


def test_resampled_medians_match_a_brute_force_bootstrap():
    from xmfu.harness.results.statistics.summary import resampled_medians

    rng = np.random.default_rng(7)
    for n in (9, 40):
        x = rng.lognormal(0, 0.3, n)
        brute = np.median(x[rng.integers(0, n, (40000, n))], axis=1)
        fast = resampled_medians(x, 40000, rng)
        assert np.quantile(fast, [0.025, 0.5, 0.975]) == pytest.approx(np.quantile(brute, [0.025, 0.5, 0.975]),
                                                                      rel=0.01)


def test_repeats_make_the_figure_the_median_of_repeat_medians_with_a_wider_interval():
    rng = np.random.default_rng(2)
    offsets = [0.9, 1.0, 1.1, 1.0, 0.95]  # run-to-run shifts the samples of one repeat cannot see
    samples = [v for o in offsets for v in o * (1 + 0.001 * rng.standard_normal(50))]
    groups = [i for i in range(5) for _ in range(50)]
    one = summarize(samples[:50])
    rep = summarize(samples, groups=groups)
    assert rep.median == pytest.approx(1.0, rel=0.01) and "two-stage" in rep.ci_method
    assert rep.rel_ci_half_width > 10 * one.rel_ci_half_width


def test_paired_speedup_over_repeats():
    from xmfu.harness.results.statistics.speedup import paired_speedup

    rng = np.random.default_rng(3)
    samples_b, samples_c, rounds, repeats = [], [], [], []
    for k in range(4):
        for r in range(10):
            for _ in range(3):
                samples_b.append(1.0 + 0.01 * rng.standard_normal())
                samples_c.append((1.0 + 0.01 * rng.standard_normal()) / 1.2)
                rounds.append(r)
                repeats.append(k)
    s = paired_speedup("b", (samples_b, rounds, repeats), (samples_c, rounds, repeats))
    assert s.value == pytest.approx(1.2, rel=0.02) and s.verdict == "faster"
    assert s.variance_source == "4 repeats of interleaved rounds" and s.rounds == 40


def test_welch_interval_on_run_medians():
    from xmfu.harness.results.statistics.speedup import runs_ratio_ci, t975

    assert t975(4) == 2.776 and abs(t975(60) - 2.000) < 0.002 and abs(t975(1e6) - 1.96) < 0.001
    value, low, high = runs_ratio_ci([1.0, 1.02, 0.98, 1.01, 0.99], [0.5, 0.51, 0.49, 0.505, 0.495])
    assert value == pytest.approx(2.0, rel=1e-3) and 1.9 < low < 2.0 < high < 2.1
    wide = runs_ratio_ci([1.0, 1.3], [1.0, 0.8])  # two runs a side that disagree: the interval says so
    assert wide[2] / wide[1] > 5
    one = runs_ratio_ci([1.0], [0.9], sd_known=(0.01, 8))
    assert 1.07 < one[1] < 1.111 < one[2] < 1.15  # two sides, each with the known run-to-run sd
    with pytest.raises(ValueError):
        runs_ratio_ci([1.0], [0.9])


def test_runs_ratio_ci_store_takes_a_bundles_repeats_only_where_they_vary_more():
    """One bundle per side: a bundle is one run, whose log figure has the store's variance (sd 1%, 11 runs); its
    k repeats' s^2/k is a lower bound on that variance (one-way random effects: Var = tau^2 + sigma^2/k), used
    where it is larger. Hand computation: ratio 1, se^2 = 2 * 0.01^2, df = 20 (Welch-Satterthwaite), t = 2.086."""
    value, low, high = runs_ratio_ci_store([1.0], [1.0], (1, 1), (0.01, 11))
    half = 2.086 * (2 * 0.01**2) ** 0.5
    assert value == pytest.approx(1.0) and low == pytest.approx(np.exp(-half)) and high == pytest.approx(np.exp(half))
    steady = runs_ratio_ci_store([1.0, 1.001, 0.999], [1.0], (1, 1), (0.01, 11))
    assert steady[1] == pytest.approx(low, rel=1e-3)  # repeats tighter than the store: the store's variance
    wild = runs_ratio_ci_store([0.7, 1.0, 1.4], [1.0], (1, 1), (0.01, 11))
    assert wild[2] / wild[1] > 1.5  # repeats that vary more than the store's runs widen the interval


def test_runs_ratio_ci_store_pools_several_bundles_with_the_store():
    """n bundles per side are n runs: their variance pooled with the store's, ((m-1) sd^2 + (n-1) s^2) / (m+n-2)."""
    logs = np.log([0.9, 1.0, 1.1])
    pooled = (10 * 0.01**2 + 2 * logs.var(ddof=1)) / 12
    value, _, high = runs_ratio_ci_store([0.9, 1.0, 1.1], [0.9, 1.0, 1.1], (3, 3), (0.01, 11))
    half = 2.064 * (2 * pooled / 3) ** 0.5  # df = 24 (both sides pooled with 12 each)
    assert value == pytest.approx(1.0) and high == pytest.approx(np.exp(half), rel=1e-6)


def test_summarize_many_gives_each_list_exactly_what_summarize_gives():
    """The batched statistics `xmfu validate` re-derives rows with (issue 30, item 14) are summarize's, bit for bit:
    lists of one length share the seeded bootstrap's ranks, lists of other lengths do not get them."""
    from xmfu.harness.results.statistics.summary import summarize_many

    rng = np.random.default_rng(7)
    batch = [list(rng.lognormal(-7, 0.2, n)) for n in (1, 2, 3, 3, 4, 5, 5, 5, 16, 17, 200, 3, 5000, 5000)]
    batch.append([2e-3] * 6)  # all equal: cv 0, CI the value
    for resamples in (1000, 137):
        assert summarize_many(batch, resamples) == [summarize(x, resamples) for x in batch]
    assert summarize_many([]) == []
