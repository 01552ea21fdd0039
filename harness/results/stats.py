"""Summary statistics of timing samples: median, spread, and a bootstrap CI of the median.

The median is the headline statistic (robust to the occasional preempted or throttled sample); the
bootstrap interval says how well it is known, and drives the stop rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

CI_LEVEL = 0.95


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    min: float
    max: float
    p10: float
    p90: float
    p99: float
    ci95_low: float
    ci95_high: float
    cv: float  # coefficient of variation (stdev / mean)

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)

    @property
    def rel_ci_half_width(self) -> float:
        """Half the 95% CI width, relative to the median."""
        return (self.ci95_high - self.ci95_low) / 2 / self.median if self.median > 0 else float("inf")


def bootstrap_median_ci(samples: Sequence[float], resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% CI of the median (Efron & Tibshirani, An Introduction to the Bootstrap, ch. 13).

    Seeded, so the same samples always give the same interval.
    """
    x = np.asarray(samples, dtype=np.float64)
    if x.size < 2:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    medians = np.median(x[idx], axis=1)
    alpha = (1 - CI_LEVEL) / 2
    low, high = np.quantile(medians, [alpha, 1 - alpha])
    return float(low), float(high)


def summarize(samples: Sequence[float], resamples: int = 1000) -> Summary:
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples to summarize")
    low, high = bootstrap_median_ci(x, resamples)
    mean = float(x.mean())
    cv = float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0
    p10, p90, p99 = np.percentile(x, [10, 90, 99])
    return Summary(
        n=int(x.size), median=float(np.median(x)), mean=mean, min=float(x.min()), max=float(x.max()),
        p10=float(p10), p90=float(p90), p99=float(p99), ci95_low=low, ci95_high=high, cv=cv,
    )


VERDICTS = ("faster", "slower", "equivalent", "inconclusive")


@dataclass(frozen=True)
class Speedup:
    """Baseline time / candidate time: above 1 means the candidate is faster."""

    baseline: str
    value: float
    ci95_low: float
    ci95_high: float
    rounds: int
    verdict: str

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def _by_round(samples: Sequence[float], rounds: Sequence[int]) -> dict[int, list[float]]:
    grouped: dict[int, list[float]] = {}
    for value, r in zip(samples, rounds, strict=True):
        grouped.setdefault(r, []).append(value)
    return grouped


def paired_speedup(baseline: str, base: tuple[Sequence[float], Sequence[int]],
                   cand: tuple[Sequence[float], Sequence[int]], margin: float = 0.02,
                   resamples: int = 1000, seed: int = 0) -> Speedup | None:
    """Speedup of a candidate over a baseline timed in the same interleaved rounds.

    The bootstrap resamples whole rounds (a block bootstrap), so drift that hit both contenders in the same
    round stays paired instead of widening or biasing the interval. Verdict: the 95% interval above 1+margin
    is faster, below 1-margin slower, inside [1-margin, 1+margin] equivalent, otherwise inconclusive.
    """
    b, c = _by_round(*base), _by_round(*cand)
    shared = sorted(set(b) & set(c))
    if not shared:
        return None
    value = float(np.median(np.concatenate([b[r] for r in shared])) / np.median(np.concatenate([c[r] for r in shared])))
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(resamples):
        pick = rng.choice(shared, size=len(shared))
        ratios.append(np.median(np.concatenate([b[r] for r in pick])) / np.median(np.concatenate([c[r] for r in pick])))
    low, high = (float(x) for x in np.quantile(ratios, [(1 - CI_LEVEL) / 2, 1 - (1 - CI_LEVEL) / 2]))
    return Speedup(baseline, value, low, high, len(shared), verdict(low, high, margin))


def verdict(low: float, high: float, margin: float) -> str:
    """From a 95% interval of a speedup (baseline time / candidate time) to a word."""
    if low > 1 + margin:
        return "faster"
    if high < 1 - margin:
        return "slower"
    if low >= 1 - margin and high <= 1 + margin:
        return "equivalent"
    return "inconclusive"


def independent_speedup(baseline: str, base: Sequence[float], cand: Sequence[float], margin: float = 0.02,
                        resamples: int = 2000, seed: int = 0) -> Speedup:
    """Speedup between runs that were not interleaved (two bundles): each side's samples are resampled
    on its own (percentile bootstrap of the ratio of medians)."""
    b, c = np.asarray(base, dtype=np.float64), np.asarray(cand, dtype=np.float64)
    rng = np.random.default_rng(seed)
    mb = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    mc = np.median(c[rng.integers(0, c.size, (resamples, c.size))], axis=1)
    low, high = (float(x) for x in np.quantile(mb / mc, [(1 - CI_LEVEL) / 2, 1 - (1 - CI_LEVEL) / 2]))
    return Speedup(baseline, float(np.median(b) / np.median(c)), low, high, 0, verdict(low, high, margin))
