"""A series' judgement: its points over time, the gap between two platforms, the regression check against the
run-to-run noise (the prediction interval of the next run), steps, and which changes are within the noise."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.history.stored import SERIES_KEY, Stored
from xmfu.harness.results.schema.row import Row
from xmfu.harness.results.statistics.speedup import t_quantile

# `check` judges a series only with at least MIN_BASELINE runs before the latest. The noise it compares a change
# with is 1.4826 x the median absolute deviation (MAD) of those runs, and the MAD of a few points means little:
# of 2 points it is half their gap, of 3 the smaller distance to their median. Simulated on Gaussian noise
# (seeded, 400,000 trials; tests/results/test_history.py pins it), a latest point beyond 3 such sigmas is pure
# noise on 23% of nights with 2 baseline points, 31% with 3, 15% with 5 and 9.5% with 7, the default window.
# (1.4826 = 1/Phi^-1(3/4) makes the MAD estimate a normal sigma: Rousseeuw & Croux, JASA 88, 1993.)
# Below 5 points the rule is a coin toss weighted by how many points there happen to be; 5 is the least we
# accept, and even there the rule alone leaves 15% of pure-noise nights flagged per series, which is why a
# flagged point is then weighed against its own evidence (`unreliable`: contended, or a CI or CV as wide as
# the change, or a change within the run-to-run spread of the baseline runs themselves) before anyone calls it a
# regression. Fewer runs: "insufficient history", not judged.
MIN_BASELINE = 5


MIN_RUNS = MIN_BASELINE + 1  # the baseline and the latest run


LOWER_IS_BETTER = ("median_s", "ci95_low_s", "ci95_high_s", "cv", "ttft_s", "ttft_p99_s", "tpot_s", "tpot_p99_s")


def worse(metric: str, change: float | None) -> bool:
    """Whether a relative change of `metric` is for the worse (times and their spread: up; the rest: down)."""
    if change is None:
        return False
    return change > 0 if metric in LOWER_IS_BETTER else change < 0


def _counted(row: Stored, metric: str) -> float | None:
    """The row's `metric` where a series counts it: an ok row, validly timed, with a value; else None. A null
    timing_valid (a file written before the column) is not valid, as it was when rows were dicts."""
    value = row.figure(metric)
    return float(value) if row.status == "ok" and value is not None and row.timing_valid else None


def series(rows: Sequence[Stored], metric: str) -> dict[tuple, list[tuple[datetime, float]]]:
    """SERIES_KEY -> [(created, value)] in time order, ok rows with a valid timing only. Runs whose
    comparability keys differ (another FLOP convention, protocol or parameters) are separate series."""
    out: dict[tuple, list[tuple[datetime, float]]] = defaultdict(list)
    for r in rows:
        value = _counted(r, metric)
        if value is not None:
            out[r.key()].append((r.created, value))
    return {k: sorted(v) for k, v in out.items()}


def series_label(key: tuple, keys: Sequence[tuple]) -> str:
    """'matmul c torch GPU bf16', with the comparability key added where two series differ only by it."""
    named = dict(zip(SERIES_KEY, key, strict=True))
    head = " ".join(str(named[k]) for k in SERIES_KEY[:-1])
    twins = sum(1 for other in keys if other[:-1] == key[:-1])
    return f"{head} [key {named['comparability_key']}]" if twins > 1 else head


def gap(rows: Sequence[Stored], metric: str, numerator: str, denominator: str) -> list[dict[str, Any]]:
    """metric(numerator platform or device) / metric(denominator) on matching cases, per day. A case matches
    only with the same comparability key on both sides (the same spec, dtype, FLOP convention and protocol)."""
    by_day: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        value = _counted(r, metric)
        if value is None:
            continue
        side = next((s for s in (numerator, denominator) if s in (r.platform, r.device)), None)
        if side:
            key = (r.created.date().isoformat(), r.workload, r.case_id, r.dtype, r.comparability_key)
            by_day[key][side].append(value)
    out = []
    for (day, workload, case_id, dtype, comparability), sides in sorted(by_day.items(), key=lambda kv: str(kv[0])):
        if sides[numerator] and sides[denominator]:
            ratio = statistics.fmean(sides[numerator]) / statistics.fmean(sides[denominator])
            out.append({"day": day, "workload": workload, "case_id": case_id, "dtype": dtype,
                        "comparability_key": comparability, "ratio": ratio})
    return out


# How unlikely a run-to-run fluctuation must be before a flagged change counts: the latest run lies outside the
# central 99.98% prediction interval of its baseline runs (0.01% on the side of the worse; see `run_to_run`). Why
# so far out: a nightly judges each series every night, 27 of them in suite version 1 at smoke sizes, about
# 10,000 series-nights a year; at 1e-4 each, normal run-to-run noise alone pages someone about once a year
# (a Bonferroni budget), where 0.001 would page about ten times.
PREDICTION_TAIL = 1e-4


@dataclass(frozen=True)
class Rule:
    """How `history check`, the nightly and the history page judge a point, declared once here (issue 38, item 5),
    and recorded with each judgement (suite.json, `history check --format json`, the store's `_judgements/`:
    results/history/recorded.py) so that a changed rule shows as one instead of silently re-judging history.

    A point is held against the `baseline` statistic (the median) of the `window` runs before it; it is a change when
    `consecutive` points in a row (1: the latest alone) lie beyond max(`sigmas` x 1.4826 x the MAD of those runs,
    `min_change` x their median) and, for the worse, outside their prediction interval with `prediction_tail` on
    that side (`run_to_run`); a series is judged only with `min_baseline` runs before its latest (MIN_BASELINE);
    every series should be able to detect a change of `detect` (results/history/power.py). The commands' options
    and the functions below take their defaults from RULE. `window`, `sigmas`, `min_change` and `detect` are
    options (`--window`...); `baseline`, `consecutive`, `prediction_tail` and `min_baseline` are what the gate
    implements (the median, the latest point alone, PREDICTION_TAIL, MIN_BASELINE), recorded so that a version
    that changes them is seen to."""

    window: int = 7
    baseline: str = "median"
    consecutive: int = 1
    sigmas: float = 3.0
    min_change: float = 0.02
    prediction_tail: float = PREDICTION_TAIL
    min_baseline: int = MIN_BASELINE
    detect: float = 0.10

    def text(self) -> str:
        """The rule in one line, as `history check` and the page state it."""
        points = "the latest point lies" if self.consecutive == 1 else f"{self.consecutive} points in a row lie"
        return (f"the {self.baseline} of the previous {self.window} runs; a change when {points} beyond "
                f"max({self.sigmas:g} robust sigmas, "
                f"{100 * self.min_change:g}%) and, for the worse, outside the runs' "
                f"{100 * (1 - 2 * self.prediction_tail):g}% prediction interval; judged from {self.min_baseline} "
                f"runs before the latest; every series should detect {100 * self.detect:g}%")

    def differences(self, other: Rule) -> list[str]:
        """'window 7 -> 5' for each field that differs from `other` (this rule being the newer)."""
        mine, theirs = dataclasses.asdict(self), dataclasses.asdict(other)
        return [f"{name} {theirs[name]} -> {value}" for name, value in mine.items() if theirs[name] != value]


RULE = Rule()


def insufficient(rows: Sequence[Stored], metric: str, minimum: int = MIN_RUNS) -> list[dict[str, Any]]:
    """The series `check` cannot judge: fewer than `minimum` runs."""
    return [{**dict(zip(SERIES_KEY, key, strict=True)), "runs": len(points), "minimum": minimum}
            for key, points in series(rows, metric).items() if len(points) < minimum]


def check(rows: Sequence[Stored], metric: str, window: int = RULE.window, sigmas: float = RULE.sigmas,
          min_change: float = RULE.min_change) -> list[dict[str, Any]]:
    """Series whose latest value moved more than the noise of its rolling baseline.

    Baseline = median of the previous `window` values; noise = 1.4826 x their median absolute deviation (a
    robust standard deviation); flagged when |latest - baseline| > max(sigmas x noise, min_change x baseline).
    """
    flagged = []
    latest = latest_rows(rows, metric)
    for key, points in series(rows, metric).items():
        if len(points) < MIN_RUNS:
            continue
        found = judge_point(points, len(points) - 1, window, sigmas, min_change)
        if found:
            flagged.append({**dict(zip(SERIES_KEY, key, strict=True)), "metric": metric, **found,
                            "flags": stored_flags(latest[key]),
                            **unreliable(latest[key], found["change"], found["run_to_run"])})
    return flagged


def stored_flags(row: Stored) -> str:
    """A stored row's quality flags ('contended, CI missed'; '' for none). A file written before the `flags`
    column has only `contended` to say (null flags): that is what it says."""
    if row.flags is not None:
        return str(row.flags)
    return "contended" if row.contended else ""


def flagged_within_noise(rows: Sequence[Stored], metric: str,
                         changed: Sequence[dict[str, Any]]) -> list[tuple[tuple, str]]:
    """(series key, flags) of the series `check` judged and found within the noise whose latest row carries
    quality flags: 'no change' on a row that says it was contended is not the same verdict as on a clean one."""
    seen = {tuple(f[k] for k in SERIES_KEY) for f in changed}
    judged = {key for key, points in series(rows, metric).items() if len(points) >= MIN_RUNS}
    return [(key, said) for key, row in latest_rows(rows, metric).items()
            if key in judged and key not in seen and (said := stored_flags(row))]


def latest_rows(rows: Sequence[Stored], metric: str) -> dict[tuple, Stored]:
    """SERIES_KEY -> the series' latest row (the one `series` puts last)."""
    out: dict[tuple, tuple[tuple[datetime, float], Stored]] = {}
    for r in rows:
        value = _counted(r, metric)
        if value is not None:
            key, point = r.key(), (r.created, value)
            if key not in out or point >= out[key][0]:
                out[key] = (point, r)
    return {key: r for key, (_, r) in out.items()}


def spread(row: Stored) -> dict[str, float | None]:
    """The row's own precision, as fractions of its median time: the 95% CI half-width and the CV of its samples
    (both recorded by the run; None where it has none)."""
    median, low, high = row.median_s, row.ci95_low_s, row.ci95_high_s
    half = (high - low) / 2 / median if median and low is not None and high is not None else None
    return {"ci95_half_width": half, "cv": row.cv}


def run_to_run(before: Sequence[float], latest: float) -> dict[str, Any] | None:
    """Whether `latest` could be one more run like the `before` runs, judged by their own run-to-run spread:
    {"sd", "runs", "bound", "within"} on natural-log values (sd and bound in log units, about fractions), or None
    with fewer than 2 positive values.

    Why: a row's CI and CV measure the spread of samples within one process, and processes differ by more
    (collectives between CPU processes on a shared 2-core machine were bimodal from one run to the next, each
    run's own CI narrow: -54% to -89% between runs of one build), while the MAD that `judge_point` scales its limit
    by is near 0 when 4 of 5 baseline runs agree, however far the fifth lies. So the baseline's spread is
    taken as the sample standard deviation of its logs, which the fifth run does widen, and the latest run is
    held against the prediction interval for one new observation from the same normal distribution, mean and
    variance unknown: (y - mean) / (sd * sqrt(1 + 1/n)) follows Student's t with n - 1 degrees of freedom
    (Hahn & Meeker, Statistical Intervals, Wiley 1991; the form R's EnvStats::predIntNorm computes). Logs, because
    every judged metric is a time or proportional to 1/time, so a slowdown by a factor is one distance either
    way. With the t quantile at 1 - PREDICTION_TAIL a run of an unchanged build lies beyond the bound on the
    side of the worse on PREDICTION_TAIL of series-nights when its log-values are normal, whatever n (the t
    interval is exact); at MIN_BASELINE = 5 runs the bound is 14.3 sds, at 7 (the window) 8.6: a 2x slowdown
    (log 2 = 0.69) is still judged in series whose runs differ by up to 4.8% and 8.1% (sd)."""
    found = interval(before)
    if found is None or latest <= 0:
        return None
    n, mean, sd, bound = found
    return {"sd": sd, "runs": n, "bound": bound, "within": abs(math.log(latest) - mean) <= bound}


def interval(before: Sequence[float]) -> tuple[int, float, float, float] | None:
    """run_to_run's prediction interval of the `before` runs on their natural-log values: (runs, mean, sd, bound),
    the interval mean +- bound; None with fewer than 2 positive values."""
    logs = [math.log(v) for v in before if v > 0]
    if len(logs) < 2:
        return None
    n, mean, sd = len(logs), statistics.fmean(logs), statistics.stdev(logs)
    return n, mean, sd, t_quantile(PREDICTION_TAIL, n - 1) * sd * math.sqrt(1 + 1 / n)


def unreliable(row: Stored, change: float | None,
               history_spread: dict[str, Any] | None = None) -> dict[str, Any]:
    """Whether a change the rule flagged is evidence of anything, by the row's own account and its series':
    `contended` when the run marked it measured under contention (another process on the CPU or GPU), `noisy`
    when its own 95% CI half-width or its CV is at least as wide as the change (the point could be anywhere in
    that width), or when the latest run lies within the prediction interval of the baseline runs
    (`history_spread`: run_to_run's answer; runs of this series have differed that much before). Empty when
    neither discounts it. Every metric `check` judges is a time or proportional to 1/time, so the time's
    relative spread is the metric's."""
    figures: dict[str, Any] = spread(row)
    if history_spread is not None:
        figures["run_to_run_sd"] = history_spread["sd"]
    if row.contended:
        return {"unreliable": "contended", "why": row.contention or "contended", **figures}
    size = abs(change) if change is not None else 0.0
    wide = {k: v for k, v in figures.items() if k != "run_to_run_sd" and v is not None and v >= size}
    if wide:
        return {"unreliable": "noisy", "why": ", ".join(f"{k} {100 * v:.1f}%" for k, v in wide.items()), **figures}
    if history_spread is not None and history_spread["within"]:
        bound = history_spread["bound"]
        why = (f"run-to-run sd {100 * history_spread['sd']:.1f}% (of log values) over the {history_spread['runs']} "
               f"runs before; their {100 * (1 - 2 * PREDICTION_TAIL):g}% prediction interval reaches a factor "
               f"{math.exp(bound):.3g} either side of their geometric mean")
        return {"unreliable": "noisy", "why": why, **figures}
    return {}


def describe(f: dict[str, Any]) -> str:
    """One flagged change as a line: series, latest vs baseline, change and limit, and why it is unreliable."""
    line = (f"{f['workload']} {f['case_id']} {f['backend']} {f['device']}: {f['metric']} {f['latest']:.4g} vs "
            f"baseline {f['baseline']:.4g} ({100 * f['change']:+.1f}%, limit {f['limit']:.3g})")
    if f.get("unreliable"):
        line += f" [unreliable: {f['unreliable']}: {f['why']}]"
    if f.get("flags"):  # the latest row's quality flags (harness/results/analysis/flags.py), beside the verdict
        line += f" [flags: {f['flags']}]"
    return line


def judge_point(points: Sequence[tuple[datetime, float]], i: int, window: int, sigmas: float,
                min_change: float, start: int = 0) -> dict[str, Any] | None:
    """Point i against the median of the `window` points before it, none before `start` (check's rule);
    None within the noise."""
    values = [v for _, v in points]
    before, latest = values[max(start, i - window):i], values[i]
    base = statistics.median(before)
    mad = statistics.median(abs(v - base) for v in before)
    limit = max(sigmas * 1.4826 * mad, min_change * abs(base))
    if abs(latest - base) <= limit:
        return None
    return {"latest": latest, "baseline": base, "change": latest / base - 1 if base else None, "limit": limit,
            "at": points[i][0], "previous_at": points[i - 1][0], "run_to_run": run_to_run(before, latest)}


def steps(rows: Sequence[Stored], metric: str, window: int = RULE.window, sigmas: float = RULE.sigmas,
          min_change: float = RULE.min_change) -> list[dict[str, Any]]:
    """The changes beyond the noise in the whole history of every series, each marked where it began: a
    point is judged by `check`'s rule against the runs before it, and after a change only the runs since
    it form the baseline (so one step is one mark, not one for every night until the median catches up)."""
    out = []
    for key, points in series(rows, metric).items():
        start = 0
        for i in range(len(points)):
            if i - start < MIN_RUNS - 1:  # too few runs at this level to judge yet
                continue
            found = judge_point(points, i, window, sigmas, min_change, start)
            if found:
                out.append({**dict(zip(SERIES_KEY, key, strict=True)), "metric": metric, **found,
                            "worse": worse(metric, found["change"])})
                start = i
    return out


def run_to_run_noise(rows: Sequence[Stored], window: int = 10,
                     minimum: int = 3) -> Callable[[Row | Mapping[str, Any]], tuple[float, int] | None]:
    """For `xmfu compare --noise-from STORE`: a bundle row -> (run-to-run standard deviation of log median
    time over the series' last `window` runs, runs used), or None with fewer than `minimum` runs. The
    deviation is 1.4826 x the median absolute deviation (a robust standard deviation: one outlier run does
    not set the noise)."""
    found = series(rows, "median_s")

    def noise(row: Row | Mapping[str, Any]) -> tuple[float, int] | None:
        record = row if isinstance(row, Row) else typed(row)  # a bundle row, as its record or as written
        points = found.get(tuple(getattr(record, k) for k in SERIES_KEY), [])[-window:]
        if len(points) < minimum:
            return None
        logs = [math.log(v) for _, v in points if v > 0]
        center = statistics.median(logs)
        return 1.4826 * statistics.median(abs(v - center) for v in logs), len(logs)

    return noise
