from __future__ import annotations

import numpy as np
import pytest

from harness.results.stats import bootstrap_median_ci, summarize


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
    from harness.results.stats import paired_speedup

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
    from harness.results.stats import paired_speedup

    drift = [1.0 + 0.5 * i for i in range(10)]  # both contenders slow down together, round by round
    base = _rounds([[d, d] for d in drift])
    cand = _rounds([[d / 1.25, d / 1.25] for d in drift])
    s = paired_speedup("b", base, cand)
    assert s.value == pytest.approx(1.25) and s.verdict == "faster"
