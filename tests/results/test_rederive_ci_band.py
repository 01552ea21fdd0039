"""`xmfu validate` re-draws a bundle's bootstrap bounds (harness/results/rederive/times.py): a genuine interval drawn
under another random stream must pass, even where few samples make the bootstrap discrete (a smoke run's rounds),
and an interval moved off its samples must not. CI once refused a genuine smoke attention bundle's speedup bound
that lay just below the plain binomial band."""

import numpy as np
import pytest

from xmfu.harness.results.rederive import row_checks, times
from xmfu.harness.results.statistics.paired_bounds import paired_speedup_bounds
from xmfu.harness.results.statistics.speedup import paired_speedup
from xmfu.harness.results.statistics.summary import summarize

RESAMPLES = 500
SETTINGS = times.Settings(resamples=RESAMPLES)


def _series(rounds: int, per_round: int, centre: float, seed: int) -> tuple[list[float], list[int]]:
    rng = np.random.default_rng(seed)
    values = centre * (1 + 0.05 * rng.standard_normal(rounds * per_round))
    return [float(v) for v in values], [r for r in range(rounds) for _ in range(per_round)]


def _problems(sp: dict, base: tuple, cand: tuple) -> list[str]:
    """row_checks._one_speedup as speedup_problems calls it: the run's own seeded draws of the pair first."""
    own = paired_speedup_bounds([(base, cand)], RESAMPLES, (row_checks.TAIL, 1 - row_checks.TAIL))[0]
    return row_checks._one_speedup(sp, base, cand, own, SETTINGS, "line 1")


@pytest.mark.parametrize("rounds", [3, 9])
def test_genuine_speedup_bounds_under_other_seeds_pass(rounds):
    """A run's seed is not the validator's: the bounds other seeds draw must lie in the band. Of 5,600 bounds
    (3 to 9 rounds, seeds 1-399) the plain binomial band refused 4, seed 52 at 9 rounds among them; the Wilson
    band none. The seeds here include 52."""
    base, cand = _series(rounds, 3, 1.0, 1), _series(rounds, 3, 2.8, 2)
    refused = []
    for seed in range(45, 60):
        sp = paired_speedup("b", base, cand, resamples=RESAMPLES, seed=seed).as_dict()
        problems = _problems(sp, base, cand)
        refused += [p for p in problems if "bootstrap bound" in p]
    assert refused == []


def test_the_runs_own_seeded_interval_is_accepted_as_reproduced():
    base, cand = _series(4, 2, 1.0, 3), _series(4, 2, 1.5, 4)
    sp = paired_speedup("b", base, cand, resamples=RESAMPLES).as_dict()
    assert _problems(sp, base, cand) == []


@pytest.mark.parametrize("bound", ["ci95_low", "ci95_high"])
def test_a_speedup_bound_moved_off_its_samples_is_refused(bound):
    base, cand = _series(8, 3, 1.0, 5), _series(8, 3, 2.0, 6)
    sp = paired_speedup("b", base, cand, resamples=RESAMPLES).as_dict()
    sp[bound] = sp["value"]  # the interval narrowed to its point on one side, the verdict kept
    problems = _problems(sp, base, cand)
    assert any(f"speedup.{bound}" in p and "is not a bootstrap bound" in p for p in problems), problems


def test_a_median_bound_moved_inside_its_samples_is_refused():
    values = [float(v) for v in 1 + 0.1 * np.random.default_rng(7).standard_normal(60)]
    truth = summarize(values, RESAMPLES, None)
    stated = {"ci95_low": truth.median * 0.999, "ci95_high": truth.ci95_high}
    problems = times._ci_problems(stated, truth, values, None, SETTINGS, "line 1", "time_s")
    assert any("time_s.ci95_low" in p for p in problems), problems


def test_the_band_reaches_the_draws_beside_an_interpolated_bound():
    """Three values only: a bound np.quantile interpolates between two of them lies within the band."""
    draws = np.repeat([0.5, 0.6, 0.7], [100, 860, 40])
    low, high = times.ci_band(draws, 0.975, RESAMPLES)
    assert low <= 0.65 <= high
