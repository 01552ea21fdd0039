"""What the gate can see: per series, the smallest relative change for the worse that `history check` would call a
regression at the series' current run-to-run noise, and the night's count of series that can detect a given change
(issue 38, item 1)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from xmfu.harness.results.history import judge
from xmfu.harness.results.history.stored import Stored

DETECT = judge.RULE.detect  # the change the summary asks every series to be able to see (`--detect`)


@dataclass(frozen=True)
class Power:
    """One judged series' detectable change, from the runs its latest point was judged against."""

    key: tuple  # SERIES_KEY
    metric: str
    runs: int  # the baseline runs it is derived from
    rule_bound: float | None  # the MAD rule's bound, as a relative change (None: a baseline median of 0)
    interval_bound: float | None  # the prediction interval's bound on the side of the worse (None: a value <= 0)
    detectable: float | None  # the larger of the two; None: not measured (either is None)

    def can_detect(self, change: float) -> bool:
        return self.detectable is not None and self.detectable < change

    def text(self) -> str:
        """'detects >= 12.0%', with the factor where the change is large ('detects >= 97.0% (a 33x slowdown)')."""
        if self.detectable is None:
            return "detectable change not measured (a baseline value <= 0)"
        said = f"detects >= {100 * self.detectable:.1f}%"
        factor = slowdown(self.metric, self.detectable)
        return f"{said} (a {factor:.3g}x slowdown)" if factor >= 2 else said


def slowdown(metric: str, change: float) -> float:
    """A relative change for the worse as the factor the time grows by: a time (lower is better) by 1 + change; a
    figure proportional to 1/time (every other judged metric: judge.unreliable's docstring) by 1 / (1 - change)."""
    if metric in judge.LOWER_IS_BETTER:
        return 1 + change
    return math.inf if change >= 1 else 1 / (1 - change)


def detectable(before: Sequence[float], metric: str, sigmas: float = judge.RULE.sigmas,
               min_change: float = judge.RULE.min_change) -> tuple[float | None, float | None]:
    """(the MAD rule's bound, the prediction interval's bound), each the smallest relative change for the worse
    (latest / baseline - 1, as its size) beyond which a latest run is judged a regression against `before`.

    judge.judge_point flags a latest value when |latest - base| > max(sigmas x 1.4826 x MAD, min_change x |base|), base
    the median of `before`: a change of the relative size limit / base either way. judge.unreliable then labels it
    `noisy` (not a regression) while log(latest) lies within mean +- bound, the prediction interval of the
    `before` runs' logs (judge.interval); on the side of the worse the latest must lie below exp(mean - bound) (a
    figure proportional to 1/time) or above exp(mean + bound) (a time), i.e. a change of 1 - exp(mean - bound) / base
    or exp(mean + bound) / base - 1. A change is a regression only beyond both, so the larger is what the gate
    can see. (The latest row's own CI or CV, and contention, can still discount a change: they are that night's,
    not the series'.)"""
    base = statistics.median(before)
    mad = statistics.median(abs(v - base) for v in before)
    rule = max(sigmas * 1.4826 * mad, min_change * abs(base)) / base if base > 0 else None
    found = judge.interval(before) if all(v > 0 for v in before) else None
    if found is None or base <= 0:
        return rule, None
    _, mean, _, bound = found
    if metric in judge.LOWER_IS_BETTER:
        return rule, math.exp(mean + bound) / base - 1
    return rule, 1 - math.exp(mean - bound) / base


def powers(rows: Sequence[Stored], metric: str, window: int = judge.RULE.window, sigmas: float = judge.RULE.sigmas,
           min_change: float = judge.RULE.min_change) -> list[Power]:
    """Every series with enough runs to be judged (judge.MIN_RUNS), from the `window` runs before its latest: the
    baseline `check` judged the latest run against."""
    out = []
    for key, points in judge.series(rows, metric).items():
        if len(points) < judge.MIN_RUNS:
            continue
        before = [v for _, v in points[-1 - window:-1]]
        rule, interval = detectable(before, metric, sigmas, min_change)
        both = max(rule, interval) if rule is not None and interval is not None else None
        out.append(Power(key, metric, len(before), rule, interval, both))
    return out


@dataclass(frozen=True)
class Summary:
    change: float
    can: int
    cannot: int  # too noisy (or not measured) to see `change`
    too_few: int  # fewer than judge.MIN_RUNS runs

    def line(self) -> str:
        """'N series can detect a 10% change, M cannot (noise), K have too few runs'."""
        return (f"{self.can} series can detect a {100 * self.change:g}% change, {self.cannot} cannot (noise), "
                f"{self.too_few} have too few runs")


def summary(found: Sequence[Power], too_few: int, change: float = DETECT) -> Summary:
    can = sum(1 for p in found if p.can_detect(change))
    return Summary(change, can, len(found) - can, too_few)
