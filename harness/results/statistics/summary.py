"""Statistics of timing samples: the median and how well it is known (speedup.py compares two of them).

The median is the headline statistic (robust to the occasional preempted or throttled sample). Two kinds of
interval, each for its job:
- the order-statistic (binomial) interval of the median: distribution-free, exact coverage of at least 95% from
  n = 6 on, no resampling (Conover, Practical Nonparametric Statistics, 3rd ed., section 3.2; David & Nagaraja,
  Order Statistics, 3rd ed., section 7.1). The stop rule recomputes it after every round, and it is the final
  figure's interval of one repeat. Until issue 42 item 17 that figure was a percentile bootstrap of 500-1,000
  resamples drawn with one seed for every row: its order statistics then depended on n alone, and at n = 24 its
  97.5% bound sat at quantile 0.92-0.94 of the bootstrap distribution (`CI_BOOTSTRAP`, kept to re-derive the
  bundles written before; each row records its method in time_s.ci_method);
- the two-stage (hierarchical) bootstrap when a figure has several runs or repeats behind it: resample runs,
  then samples within each, so run-to-run variance, the quantity that decides a verdict, is in the interval
  (Davison & Hinkley, Bootstrap Methods and their Application, 1997, section 3.8).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

CI_LEVEL = 0.95
# The defaults of the run settings `timing.bootstrap_resamples` and `equivalence_margin` (harness/engine/settings.py,
# harness/config/run_settings.py declare them with these values), and of the functions here that take them.
BOOTSTRAP_RESAMPLES = 1000
EQUIVALENCE_MARGIN = 0.02
# time_s.ci_method of one repeat's interval: the binomial order-statistic interval (since issue 42 item 17); the
# seeded percentile bootstrap of the median before it ("" in rows older still, which did not record a method).
CI_BINOMIAL = "binomial order statistics of the median"
CI_BOOTSTRAP = "bootstrap of the median"
LEGACY_CI_METHODS = ("", CI_BOOTSTRAP)


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
    ci_method: str = CI_BINOMIAL

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)

    @property
    def rel_ci_half_width(self) -> float:
        """Half the 95% CI width, relative to the median."""
        return (self.ci95_high - self.ci95_low) / 2 / self.median if self.median > 0 else float("inf")


def median_ci_binomial(samples: Sequence[float], level: float = CI_LEVEL) -> tuple[float, float]:
    """Distribution-free CI of the median from order statistics: the number of samples below the median is
    Binomial(n, 1/2), so [x_(r), x_(n-r+1)] covers it with probability 1 - 2 P(B <= r-1) (Conover, Practical
    Nonparametric Statistics, 3rd ed., section 3.2). Below n = 6 no pair reaches 95%: the range is returned."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size == 0:
        raise ValueError("no samples")
    r = binomial_rank(int(x.size), level)
    if r == 0:  # not even [x_(1), x_(n)] reaches the level
        return float(x[0]), float(x[-1])
    return float(x[r - 1]), float(x[x.size - r])


@functools.lru_cache(maxsize=4096)
def binomial_rank(n: int, level: float = CI_LEVEL) -> int:
    """The largest r <= n // 2 with P(B <= r - 1) <= (1 - level) / 2, B ~ Binomial(n, 1/2): the interval of the
    median is [x_(r), x_(n-r+1)] (1-based order statistics); 0 where none reaches the level (n < 6 at 95%), and
    the interval is then the samples' range, of coverage 1 - 2^(1-n). It depends on n alone. P(B = k) by the
    ratio P(B = k) / P(B = k-1) = (n - k + 1) / k, summed in logs (2^-n underflows from n = 1075)."""
    if n < 2:
        return 0
    k = np.arange(1, n // 2 + 1, dtype=np.float64)
    log_pmf = np.concatenate(([0.0], np.cumsum(np.log((n - k + 1) / k)))) + n * math.log(0.5)
    cdf = np.cumsum(np.exp(log_pmf[: n // 2]))  # P(B <= k), k = 0 .. n//2 - 1
    return int(np.searchsorted(cdf, (1 - level) / 2, side="right"))


def resampled_medians(samples: Sequence[float], draws: int, rng: np.random.Generator) -> np.ndarray:
    """The medians of `draws` bootstrap resamples of `samples` (as np.median computes them), drawn without
    building the resamples. A resample's k-th smallest value is x_(ceil(n U_(k))), with U_(k) the k-th order
    statistic of n uniforms, Beta(k, n-k+1), and U_(k+1) = U_(k) + (1 - U_(k)) Beta(1, n-k) (David & Nagaraja,
    Order Statistics, 3rd ed., 2.2-2.3). Exact in distribution, O(draws) instead of O(draws x n)."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size < 2:
        return np.full(draws, float(x[0]) if x.size else np.nan)
    return resampled_medians_sorted(x[None, :], draws, rng)[0]


def resampled_medians_sorted(x: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """`resampled_medians` for many rows at once: `x` is (rows, n), each row sorted; returns (rows, draws). The
    rows share one draw of the ranks (which depend on n and the generator alone, never on the values): each row's
    draws are still its own bootstrap's, as `summarize_many` shares them between lists of one length; a draw per
    row was most of `xmfu compare`'s own time on two 4,000-row bundles (0.43 of 0.77 s CPU, 3 December 2026)."""
    values, drawn = distinct_resampled_medians(x, draws, rng)
    return values[:, drawn]


def distinct_resampled_medians(x: np.ndarray, draws: int,
                               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`resampled_medians_sorted` as (the distinct medians the draws take, per row: (rows, U); which of them each
    draw took: (draws,)), the same generator calls. The draws' middle ranks (or pairs of them, for even n) are a few
    distinct ones near n/2: each one's median is computed once per row, the same value to the bit as computing it
    for each draw (statistics/quantiles.py takes quantiles of such draws without building them)."""
    n = x.shape[1]
    low, high = median_ranks(n, (1, draws), rng)
    if high is None:
        ranks, drawn = np.unique(low[0], return_inverse=True)
        return x[:, ranks], drawn.reshape(-1)
    pairs, drawn = np.unique(low[0] * n + high[0], return_inverse=True)
    return (x[:, pairs // n] + x[:, pairs % n]) / 2, drawn.reshape(-1)


def median_ranks(n: int, shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """The 0-based ranks, in sorted samples of size n, of the values whose mean is each resample's median (the
    middle one for odd n: the second array is None). They depend on n and the generator alone, never on the
    values (see `resampled_medians`). Beta(1, b) is drawn by inversion, 1 - V^(1/b), which is cheaper than a
    general beta draw."""
    m = (n + 1) // 2
    u = rng.beta(m, n - m + 1, shape)
    low = np.clip(np.ceil(n * u).astype(np.int64) - 1, 0, n - 1)
    if n % 2:
        return low, None
    u_next = u + (1 - u) * (1 - rng.random(shape) ** (1 / (n - m)))
    return low, np.clip(np.ceil(n * u_next).astype(np.int64) - 1, 0, n - 1)


def bootstrap_median_ci(samples: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95% CI of the median. Seeded, so the same samples always give the same interval."""
    return ci_bounds(resampled_medians(samples, resamples, np.random.default_rng(seed)))


def ci_bounds(values: np.ndarray) -> tuple[float, float]:
    alpha = (1 - CI_LEVEL) / 2
    low, high = np.quantile(values, [alpha, 1 - alpha])
    return float(low), float(high)


def two_stage_medians(groups: Sequence[Sequence[float]], resamples: int = BOOTSTRAP_RESAMPLES,
                      seed: int = 0) -> np.ndarray:
    """Bootstrap distribution of the median of group medians: each resample draws the groups with replacement,
    then each drawn group's samples with replacement."""
    arrays = [np.asarray(g, dtype=np.float64) for g in groups]
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(arrays), size=(resamples, len(arrays)))
    medians = np.empty(picks.shape)
    for g, values in enumerate(arrays):  # one vectorised draw per group for every slot that picked it
        slots = picks == g
        medians[slots] = resampled_medians(values, int(slots.sum()), rng)
    return np.median(medians, axis=1)


def median_draws(samples: Sequence[float], resamples: int, groups: Sequence[int] | None = None,
                 seed: int = 0) -> np.ndarray:
    """The bootstrap distribution `summarize` takes its CI from: the median's (one repeat), or the median of repeat
    medians' (two-stage, two or more repeats)."""
    x = np.asarray(samples, dtype=np.float64)
    ids = sorted(set(groups)) if groups is not None else []
    if len(ids) > 1:
        g = np.asarray(groups)
        return two_stage_medians([x[g == i] for i in ids], resamples, seed)
    return resampled_medians(x, resamples, np.random.default_rng(seed))


def summarize(samples: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
              groups: Sequence[int] | None = None, ci_method: str = CI_BINOMIAL) -> Summary:
    """Descriptive statistics of all samples and the binomial interval of their median; with `groups` (the repeat
    of each sample) naming two or more repeats, the headline median is the median of the repeat medians and its CI
    the two-stage bootstrap. `ci_method` CI_BOOTSTRAP (or ""): the seeded bootstrap interval rows written before
    issue 42 item 17 state, to re-derive them."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no samples to summarize")
    median = float(np.median(x))
    ids = sorted(set(groups)) if groups is not None else []
    if len(ids) > 1:
        g = np.asarray(groups)
        parts = [x[g == i] for i in ids]
        median = float(np.median([np.median(p) for p in parts]))
        low, high = ci_bounds(two_stage_medians(parts, resamples))
        method = f"two-stage bootstrap over {len(ids)} repeats (median of repeat medians)"
    elif ci_method in LEGACY_CI_METHODS:
        (low, high), method = bootstrap_median_ci(x, resamples), CI_BOOTSTRAP
    else:
        (low, high), method = median_ci_binomial(x), CI_BINOMIAL
    mean = float(x.mean())
    cv = float(x.std(ddof=1) / mean) if x.size > 1 and mean > 0 else 0.0
    p10, p90, p99 = np.percentile(x, [10, 90, 99])
    return Summary(n=int(x.size), median=median, mean=mean, min=float(x.min()), max=float(x.max()), p10=float(p10),
                   p90=float(p90), p99=float(p99), ci95_low=low, ci95_high=high, cv=cv, ci_method=method)


def summarize_many(batch: Sequence[Sequence[float]], resamples: int = BOOTSTRAP_RESAMPLES,
                   ci_method: str = CI_BINOMIAL) -> list[Summary]:
    """`summarize(samples, resamples, None, ci_method)` of each list in `batch` (one repeat each), the same
    figures, computed for all lists of one length at once: what `xmfu validate` re-derives for every row of a
    bundle (issue 30, item 14: one call per row was most of `xmfu report`'s time over 200 bundles).

    Why the figures are the same: the binomial interval's ranks depend on n alone (`binomial_rank`). The legacy
    `bootstrap_median_ci` seeds each list's draw alike (default_rng(0)) and draws the resampled medians'
    order-statistic ranks from n and `resamples` alone (`resampled_medians_sorted`: a beta draw, then for even n a
    uniform draw, shaped (1, resamples)), never from the values; so lists of one length n share those ranks,
    drawn here once, with the same calls in the same order. The rest are numpy's reductions along each row of a
    (lists, n) array instead of over each list."""
    out: list[Summary | None] = [None] * len(batch)
    by_length: dict[int, list[int]] = {}
    for i, samples in enumerate(batch):
        by_length.setdefault(len(samples), []).append(i)
    for n, where in by_length.items():
        if n < 2:  # no ranks to share (and no samples: summarize says why)
            for i in where:
                out[i] = summarize(batch[i], resamples, None, ci_method)
            continue
        x = np.asarray([batch[i] for i in where], dtype=np.float64)  # (lists, n), in the samples' order
        for i, summary in zip(where, _summaries(x, resamples, ci_method), strict=True):
            out[i] = summary
    return out  # type: ignore[return-value]  # every index was filled above


def _summaries(x: np.ndarray, resamples: int, ci_method: str) -> list[Summary]:
    """`summarize` of each row of `x` ((lists, n), n >= 2), as `summarize_many` explains. The mean and the
    deviation are summed in the samples' order, as summarize sums them (another order changes the last bit)."""
    mean, std = x.mean(axis=1), x.std(axis=1, ddof=1)
    x = np.sort(x, axis=1)
    n = x.shape[1]
    if ci_method in LEGACY_CI_METHODS:
        low, high = median_ranks(n, (1, resamples), np.random.default_rng(0))  # bootstrap_median_ci's draw
        draws = x[:, low[0]] if high is None else (x[:, low[0]] + x[:, high[0]]) / 2  # (lists, resamples)
        alpha = (1 - CI_LEVEL) / 2
        ci, method = np.quantile(draws, [alpha, 1 - alpha], axis=1), CI_BOOTSTRAP
    else:
        r = binomial_rank(n)
        ci, method = (x[:, [0, n - 1]] if r == 0 else x[:, [r - 1, n - r]]).T, CI_BINOMIAL
    median = np.median(x, axis=1)
    p10, p90, p99 = np.percentile(x, [10, 90, 99], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):  # cv is 0 where the mean is not positive (below)
        cv = np.where(mean > 0, std / mean, 0.0)
    columns = (median, mean, x[:, 0], x[:, -1], p10, p90, p99, ci[0], ci[1], cv)  # Python floats, column by column
    return [Summary(int(n), *figures, method) for figures in zip(*(c.tolist() for c in columns), strict=True)]


def spread(medians: Sequence[float]) -> dict[str, float | int]:
    """Between-repeat (or between-run) spread of medians: (max - min) / median, and their CV."""
    m = np.asarray(medians, dtype=np.float64)
    center = float(np.median(m))
    cv = float(m.std(ddof=1) / m.mean()) if m.size > 1 and m.mean() > 0 else 0.0
    return {"n": int(m.size), "spread_rel": float((m.max() - m.min()) / center) if center > 0 else 0.0, "cv": cv}


