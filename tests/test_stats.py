from __future__ import annotations

import numpy as np
import pytest

from harness.stats import bootstrap_median_ci, summarize


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
