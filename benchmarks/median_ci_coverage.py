"""Coverage of the median's 95% CI by simulation (issue 42 item 17): how often the interval a row states contains
the true median, for n = 5..500 samples of distributions shaped like timings, with the binomial order-statistic
interval xmfu states since then and the 500-resample seeded bootstrap it stated before.

    python benchmarks/median_ci_coverage.py [--trials 20000] [--out FILE]

Each (distribution, n) draws `trials` sample sets with a known median and counts the intervals that miss it below
and above (each side should miss at most 2.5%). The binomial interval [x_(r), x_(n-r+1)] covers with probability
1 - 2 P(B <= r - 1), B ~ Binomial(n, 1/2), for every continuous distribution (Conover, Practical Nonparametric
Statistics, 3rd ed., section 3.2), at least 95% from n = 6 on (1 - 2^(1-n) = 93.75% at n = 5, where the samples'
range is the widest interval there is); with ties (a quantized timer) the closed interval covers at least as
often. The column `exact` is that probability; the simulation checks the code against it. The bootstrap's draws
are the legacy path of statistics.summary.summarize_many, the very figures the rows of that day state.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xmfu.harness.results.statistics.summary import (  # noqa: E402
    CI_BINOMIAL,
    CI_BOOTSTRAP,
    binomial_rank,
    summarize_many,
)

SIZES = (5, 6, 7, 8, 10, 12, 16, 20, 24, 32, 48, 64, 100, 150, 200, 300, 500)
LEGACY_RESAMPLES = 500  # timing=quick's bootstrap_resamples, the rows the issue measured


def _quantized(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return np.round(rng.lognormal(0.0, 0.05, shape), 2)  # a 10 ms timer on a 1 s call: ties; the median is 1.0


# name -> (draw (trials, n) samples, the true median)
DISTRIBUTIONS: dict[str, tuple[Callable[[np.random.Generator, tuple[int, int]], np.ndarray], float]] = {
    "lognormal s=0.1": (lambda rng, shape: rng.lognormal(0.0, 0.1, shape), 1.0),
    "1 + 0.05 Exp": (lambda rng, shape: 1 + 0.05 * rng.exponential(1.0, shape), 1 + 0.05 * math.log(2)),
    "1 + Pareto a=1.2": (lambda rng, shape: 1 + rng.pareto(1.2, shape), 2 ** (1 / 1.2)),
    "quantized": (_quantized, 1.0),
}


def exact_coverage(n: int) -> float:
    """1 - 2 P(B <= r - 1) of the binomial interval at n (the range's 1 - 2^(1-n) where r is 0)."""
    r = max(binomial_rank(n), 1)
    below = sum(math.comb(n, k) for k in range(r)) / 2 ** n
    return 1 - 2 * below


def misses(x: np.ndarray, median: float, method: str) -> tuple[float, float]:
    """The shares of the rows of `x` whose interval lies wholly above, and wholly below, the true median."""
    summaries = summarize_many(list(x), LEGACY_RESAMPLES, method)
    low = np.array([s.ci95_low for s in summaries])
    high = np.array([s.ci95_high for s in summaries])
    return float(np.mean(low > median)), float(np.mean(high < median))


def coverage_table(trials: int, sizes: tuple[int, ...] = SIZES, seed: int = 42) -> list[dict[str, float | str]]:
    rng = np.random.default_rng(seed)
    out: list[dict[str, float | str]] = []
    for name, (draw, median) in DISTRIBUTIONS.items():
        for n in sizes:
            x = draw(rng, (trials, n))
            row: dict[str, float | str] = {"distribution": name, "n": n, "exact": exact_coverage(n)}
            for label, method in (("binomial", CI_BINOMIAL), ("bootstrap", CI_BOOTSTRAP)):
                above, below = misses(x, median, method)
                row[label], row[f"{label}_above"], row[f"{label}_below"] = 1 - above - below, above, below
            out.append(row)
    return out


def report(rows: list[dict[str, float | str]], trials: int) -> list[str]:
    se = math.sqrt(0.05 * 0.95 / trials)
    lines = [f"95% CI of the median: coverage over {trials} sample sets per line (Monte Carlo SE {se:.4f}); "
             "misses: interval above / below the true median",
             f"{'distribution':<18} {'n':>4} {'exact':>7} {'binomial':>9} {'misses':>15} "
             f"{'bootstrap-' + str(LEGACY_RESAMPLES):>14} {'misses':>15}"]
    for r in rows:
        lines.append(f"{r['distribution']:<18} {r['n']:>4} {r['exact']:>7.4f} {r['binomial']:>9.4f} "
                     f"{r['binomial_above']:>7.4f}/{r['binomial_below']:.4f} {r['bootstrap']:>14.4f} "
                     f"{r['bootstrap_above']:>7.4f}/{r['bootstrap_below']:.4f}")
    for label in ("binomial", "bootstrap"):
        from_6 = [float(r[label]) for r in rows if int(r["n"]) >= 6]
        lines.append(f"{label}: lowest coverage from n = 6 on {min(from_6):.4f}, mean {np.mean(from_6):.4f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000)
    parser.add_argument("--out", help="where to write the table (default: a new file in the temporary folder)")
    args = parser.parse_args(argv)
    lines = report(coverage_table(args.trials), args.trials)
    print("\n".join(lines))
    out = Path(args.out) if args.out else Path(tempfile.mkstemp(prefix="xmfu-median_ci_coverage-", suffix=".txt")[1])
    out.write_text("\n".join(lines) + "\n")
    print(f"report: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
