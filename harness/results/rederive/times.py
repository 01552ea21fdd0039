"""Re-deriving a bundle's figures from what the bundle itself holds, with the code that computed them in the run.

A forger who edits a figure consistently (its TFLOP/s, MFU and checksums recomputed) still has to agree with the
raw samples, the workload's formulas, the peak table and the paired rounds. `xmfu validate` (validator.py) calls
these checks; each returns problems naming the field, the value stated and the value re-derived.

What is re-derived, and from what:
- time_s (n, median, mean, min, max, percentiles, cv) from samples.jsonl by statistics.summary.summarize, the run's own
  function: exactly, to REL_TOL. Its CI bounds by the method time_s.ci_method names: the binomial order-statistic
  interval (since issue 42 item 17) exactly; the seeded bootstrap of bundles written before, and the two-stage
  bootstrap over repeats, by the same seeded draw, or where they differ (a numpy whose random streams changed),
  within the bootstrap's Monte Carlo error, CI_SE standard errors of the quantile's rank (see ci_band);
- tflops, tflops_ci95, bandwidth_gbps, mfu, mfu_vs_achievable, hfu, algbw/busbw, comm_achieved_gbps, flops_global
  from the row's other (themselves checked) figures, by the formulas of harness/engine/metrics.py and the workloads;
- speedups and verdicts from both rows' samples by stats.paired_speedup_draws;
- peak_tflops from the peak table (machine/peaks.py) for the device environment.json records, and for the device
  name the row states;
- status against the correctness record; one row per (phase, case, backend); UTC ISO 8601 times;
- comparability_key from the row's `comparability` fields by comparability.comparability_key, the run's own
  function, and those fields' workload, params, dtype and FLOP convention against the row's own (its protocol
  against config.yaml's timing settings, by the front door's formulas; its suite tag against the manifest's
  suite) and the manifest's comparability_key from config.yaml by the run's own run_key (rederive_run.py);
- the timed samples against the warm-up calls beside them, which a forger who rescaled the samples left (warmup.py);
- the variants' time statistics from their own samples, and a sustained run's steady-state windows from the
  row's samples (rederive_series.py);
- inference figures (weights and KV-cache bytes, TTFT/TPOT percentiles from the samples, MBU against the peak
  table's memory bandwidth) by the workload's own `figures`, through the front door's formulas.
FLOPs, bytes and params come from the workload's formulas, which this layer may not import: the front door hands
them in as `Formulas` (harness/cli/formulas.py).
"""

from __future__ import annotations

import copy
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

from xmfu.harness.results.rederive.warmup import Figures as WarmupFigures
from xmfu.harness.results.rederive.warmup import json_numbers, warmup_problems
from xmfu.harness.results.statistics.summary import (
    BOOTSTRAP_RESAMPLES,
    CI_BINOMIAL,
    CI_LEVEL,
    EQUIVALENCE_MARGIN,
    LEGACY_CI_METHODS,
    Summary,
    median_draws,
    summarize,
    summarize_many,
)

REL_TOL = 1e-6  # figures recomputed in double precision; JSON keeps 17 significant digits
# A percentile bootstrap bound is a Monte Carlo estimate: with B draws, the share of draws below the value it lands
# on is a binomial proportion (Efron & Tibshirani, An Introduction to the Bootstrap, section 19.3). A stated bound
# is accepted where that share could be, by the Wilson score interval at CI_SE standard errors (Wilson 1927; it
# stays calibrated in the tails, where the plain sqrt(alpha (1 - alpha) / B) band is too narrow on the side facing
# the centre: with B = 500 it refused 4 of 9,600 genuine bounds re-drawn from a smoke attention bundle's speedups,
# and 4 of 5,600 synthetic ones; the Wilson band none of either, tests/results/test_rederive_ci_band.py). 4 SE: a
# genuine bundle re-checked under another numpy's random stream fails less than once in 10^4 bounds, while a CI
# moved past the samples it came from fails. A bound equal to the run's own seeded draw is accepted first.
CI_SE = 4.0
REFERENCE_DRAWS = 8000  # draws of the re-derived distribution the band is read from
EXACT_STATS = ("median", "mean", "min", "max", "p10", "p90", "p99", "cv")


@dataclass(frozen=True)
class Restated:
    """What a workload's formulas give for one row: the figures (params, flops, bytes...) at the row's params and
    median time; or the problem (the row contradicts its config); or why they could not be applied."""

    figures: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None
    unchecked: str | None = None


# config.yaml's text, environment.json's devices, the rows, their samples records (samples.jsonl, line by line) ->
# one Restated per row (the front door's formulas).
Formulas = Callable[[str, list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]], list[Restated]]
# config.yaml's text, the manifest -> the manifest's figures (its comparability_key), as the run derives them.
RunFormula = Callable[[str, dict[str, Any]], Restated]


@dataclass(frozen=True)
class Settings:
    """The run settings a re-derivation needs, from the bundle's config.yaml (defaults where it has none)."""

    resamples: int | None = None  # None: config.yaml does not say (a bundle not written by `xmfu run`)
    margin: float = EQUIVALENCE_MARGIN
    peak_override: float | None = None
    cpu_clock_ghz: float | None = None
    window_s: float | None = None  # timing.window_s and timing.steady_tolerance of a sustained run
    steady_tolerance: float | None = None


# config.yaml is read by every re-derivation (the settings here, imported.import_config, the front door's formulas):
# it is parsed once per distinct text in a process, by libyaml's loader where PyYAML has it (PyYAML's pure-Python
# loader took 0.14 s of CPU for a 2,000-size config.yaml, three times per bundle: issue 42 item 5). Parsing is a
# function of the text alone, so remembering it lets no bundle skip a check.
_C_LOADER = getattr(yaml, "CSafeLoader", None)
# libyaml's composer recurses in C: a config nested some 100,000 levels deep ends the process (SIGSEGV) where the
# pure loader raises RecursionError. A text that could nest deeper than this (see _depth_bound) goes to the pure
# loader, as before.
C_LOADER_MAX_DEPTH = 100
CONFIG_CACHE = 16  # distinct config.yaml texts kept parsed per process


def _depth_bound(text: str) -> int:
    """An upper bound of how deeply `text`'s YAML can nest collections: every opening bracket (a flow collection,
    quoted or not), plus, for block collections, twice the deepest line's indentation and block indicators (each
    block level opens at a deeper column or with an indicator ('-', '?', ':') on its line; an indentless sequence
    shares its mapping's column, hence twice)."""
    brackets = text.count("[") + text.count("{")
    if brackets > C_LOADER_MAX_DEPTH:
        return brackets
    block = 0
    for line in text.splitlines():
        body = line.lstrip(" ")
        if body:
            block = max(block, len(line) - len(body) + body.count("-") + body.count("?") + body.count(":"))
    return brackets + 2 * (block + 1)


# What the two loaders were seen to read apart, or could: a tab (libyaml takes tabs where the pure loader refuses
# them), a tag ('!': libyaml reads `[!, 1]` as ['', 1], the pure loader refuses it), anchors and aliases, directives,
# block scalars, escapes, the reserved indicators, complex keys, control and non-ASCII characters. A text holding
# any of them is read by the pure loader; `xmfu run`'s config.yaml (OmegaConf's YAML) holds none of them.
_NOT_PLAIN = re.compile(r"[^\n\x20-\x7e]|[!&*%@`|>\\?<]")


@functools.lru_cache(maxsize=CONFIG_CACHE)
def _parsed(config_text: str) -> tuple[Any, yaml.YAMLError | None]:
    # libyaml where the two loaders read alike: plain ASCII lines (what `xmfu run` writes), nested shallowly
    if _C_LOADER is not None and not _NOT_PLAIN.search(config_text) \
            and _depth_bound(config_text) <= C_LOADER_MAX_DEPTH:
        try:
            return yaml.load(config_text, Loader=_C_LOADER), None  # CSafeLoader: SafeLoader's constructor
        except Exception:  # a YAMLError, or a text libyaml cannot take (a lone surrogate): the pure loader says
            pass  # what it says (its error's wording and marks), or reads what libyaml did not
    try:
        return yaml.safe_load(config_text), None
    except yaml.YAMLError as exc:
        return None, exc


def parsed_config(config_text: str) -> Any:
    """config.yaml's data, as `yaml.safe_load` gives it, shared by every caller in the process: to read, never to
    change (config_data gives a copy). Raises the yaml.YAMLError safe_load raises."""
    data, error = _parsed(config_text)
    if error is not None:
        raise error
    return data


def config_data(config_text: str) -> Any:
    """config.yaml's data, as `yaml.safe_load` gives it: a fresh copy, the caller's to change."""
    return copy.deepcopy(parsed_config(config_text))


def settings_of(config_text: str) -> Settings:
    try:
        data = parsed_config(config_text)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict):
        return Settings()
    timing = data.get("timing") if isinstance(data.get("timing"), dict) else {}
    resamples = timing.get("bootstrap_resamples", BOOTSTRAP_RESAMPLES if "timing" in data else None)
    return Settings(int(resamples) if is_number(resamples) and resamples >= 1 else None,
                    float(data.get("equivalence_margin") or EQUIVALENCE_MARGIN),
                    _number(data.get("peak_tflops")), _number(data.get("cpu_clock_ghz")),
                    _number(timing.get("window_s")), _number(timing.get("steady_tolerance")))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def close(a: Any, b: Any) -> bool:
    if type(a) is float and type(b) is float:  # JSON's floats, most of what validation compares: no type walk
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-300)
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) \
            or not isinstance(b, (int, float)):
        return a == b
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-300)


def same(a: Any, b: Any) -> bool:
    """Equal, numbers to REL_TOL, through dicts and lists."""
    if _equal(a, b):  # equal as Python compares (1 == 1.0 == True, as `close` takes them): close to any tolerance
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return close(a, b)


_PLAIN_TYPES = (dict, list, str, int, float, bool, type(None))


def _equal(a: Any, b: Any) -> bool:
    """a == b for JSON-like values (one C-level comparison instead of `same`'s walk). NaN, which `same` never finds
    close, is no JSON value a bundle holds; a value of another type (a numpy array) is left to the walk."""
    if type(a) not in _PLAIN_TYPES or type(b) not in _PLAIN_TYPES:
        return False
    try:
        return (a == b) is True
    except Exception:  # a comparison that raises (a numpy array deep inside): the walk decides
        return False


def is_number(value: Any) -> bool:
    # exactly an int or a float first (JSON's numbers: bool is its own type), then subclasses (numpy's float64)
    return type(value) in _EXACT_NUMBERS or (isinstance(value, (int, float)) and not isinstance(value, bool))


_EXACT_NUMBERS = (int, float)


def finite_numbers(values: list[Any]) -> bool:
    """Every value a number (no bool) that is finite as a float: an integer past any float is not. JSON's ints and
    floats (warmup.json_numbers) are checked in C (map), other number types one by one."""
    try:
        if json_numbers(values):
            return all(map(math.isfinite, values))
        return all(is_number(v) and math.isfinite(v) for v in values)
    except OverflowError:  # an integer too large for a float
        return False


def ci_band(draws: np.ndarray, level_tail: float, resamples: int) -> tuple[float, float]:
    """Where a percentile bound at `level_tail` from `resamples` bootstrap draws may land (see CI_SE)."""
    # Wilson score interval of the share of draws below the bound, observed level_tail of `resamples`.
    z2n = CI_SE ** 2 / resamples
    centre = (level_tail + z2n / 2) / (1 + z2n)
    half = CI_SE / (1 + z2n) * math.sqrt(level_tail * (1 - level_tail) / resamples + z2n / (4 * resamples))
    # A bootstrap of few samples is discrete (its draws take a handful of values) and the run's np.quantile
    # interpolates between the two draws beside its rank, 1/resamples apart: the band reaches out to the draw
    # beside each end, so an interpolated bound is not mistaken for a moved one.
    low = np.quantile(draws, max(centre - half - 1 / resamples, 0.0), method="lower")
    high = np.quantile(draws, min(centre + half + 1 / resamples, 1.0), method="higher")
    return float(low), float(high)


def within(value: float, band: tuple[float, float]) -> bool:
    return band[0] * (1 - REL_TOL) <= value <= band[1] * (1 + REL_TOL)


def time_problems(row: dict[str, Any], rec: dict[str, Any], s: Settings, where: str,
                  truth: Summary | None = None, warm: WarmupFigures | None = None, seconds: bool = False) -> list[str]:
    """The row's time statistics against its raw samples (the same record line of samples.jsonl). `truth`: the
    samples' statistics where `time_truths` computed them already (None: computed here); `warm`: likewise the
    warm-up comparison's figures (rederive/warmup.py warmup_figures); `seconds`: every sample of the bundle is
    known to be a finite, non-negative float."""
    t, values = row.get("time_s"), rec.get("samples")
    return stats_problems(t, values, _repeats(rec, values), s, where, "time_s", "samples.jsonl", truth=truth,
                          seconds=seconds) + warmup_problems(row, rec, where, warm)


def _repeats(rec: dict[str, Any], values: Any) -> list[int] | None:
    repeats = rec.get("repeats") if isinstance(rec.get("repeats"), list) else []
    return repeats if isinstance(values, list) and len(repeats) == len(values) else None


def time_truths(rows: list[dict[str, Any]], samples: list[dict[str, Any]], s: Settings,
                seconds: bool = False) -> list[Summary | None]:
    """Per row, what `time_problems` re-derives its time_s from, `summarize` of its samples by the CI method the row
    states, computed for all rows at once (statistics.summary.summarize_many gives summarize's figures exactly,
    issue 30 item 14). None where time_problems computes them itself: no time or no samples to check (it says why),
    or samples over several repeats (the two-stage bootstrap, per row). `seconds`: every sample of the bundle is
    known to be a finite, non-negative float (not looked at again row by row)."""
    out: list[Summary | None] = [None] * len(rows)
    batches: dict[str, tuple[list, list]] = {}
    for i, (row, rec) in enumerate(zip(rows, samples, strict=False)):
        values = rec.get("samples")
        groups = _repeats(rec, values)
        if isinstance(row.get("time_s"), dict) and isinstance(values, list) and values \
                and (seconds or finite_numbers(values)) and len(set(groups or ())) <= 1:
            batch, at = batches.setdefault(ci_method_of(row["time_s"]), ([], []))
            batch.append(values)
            at.append(i)
    for method, (batch, at) in batches.items():
        for i, truth in zip(at, summarize_many(batch, s.resamples or BOOTSTRAP_RESAMPLES, method), strict=True):
            out[i] = truth
    return out


def ci_method_of(t: dict[str, Any]) -> str:
    """The method a time_s states its interval was computed by, as `summarize` takes it: the bootstrap of rows
    written before issue 42 item 17 ("" where they did not say), else the binomial interval."""
    method = t.get("ci_method", "")
    return method if method in LEGACY_CI_METHODS else CI_BINOMIAL


def stats_problems(t: Any, values: Any, groups: list[int] | None, s: Settings, where: str, label: str,
                   source: str, grouped: bool = True, truth: Summary | None = None, seconds: bool = False) -> list[str]:
    """Time statistics `t` (named `label`) against the raw samples `values` they were computed from (`source`
    names where those are); `groups`: each sample's repeat. `grouped` False: the repeats are unknown and the
    samples span several, so the figures that depend on them (median, CI) are not checked. `truth`: summarize's
    figures of these samples, already computed (time_truths); `seconds`: `values` are known to be finite floats."""
    if not isinstance(t, dict) or not isinstance(values, list):
        return []
    if not values:
        return [f"{where}: {label} is stated but {source} holds no samples for it"]
    if not (seconds or finite_numbers(values)):
        return []  # named by the samples check
    out = []
    if is_number(t.get("ci95_low")) and is_number(t.get("ci95_high")) and t["ci95_low"] > t["ci95_high"]:
        out.append(f"{where}: {label}.ci95_low {t['ci95_low']} is above ci95_high {t['ci95_high']}")
    if is_number(t.get("median")) and is_number(t.get("max")) and t["median"] > t["max"]:
        out.append(f"{where}: {label}.median {t['median']} is above {label}.max {t['max']}")
    truth = truth or summarize(values, s.resamples or BOOTSTRAP_RESAMPLES, groups, ci_method_of(t))
    if t.get("n") != truth.n:
        out.append(f"{where}: {label}.n is {t.get('n')} but {source} holds {truth.n} samples")
    for name in EXACT_STATS if grouped else tuple(n for n in EXACT_STATS if n != "median"):
        if name in t and not close(t[name], getattr(truth, name)):
            out.append(f"{where}: {label}.{name} {t[name]} is not the {name} of its {truth.n} samples in "
                       f"{source} ({getattr(truth, name)})")
    if grouped:
        out += _method_problems(t, truth, where, label) or _ci_problems(t, truth, values, groups, s, where, label)
    return out


IMPORTED_CI = "one sample: the figure the imported log printed"  # importers/rows.py: an imported log's one figure


def _method_problems(t: dict[str, Any], truth: Summary, where: str, label: str) -> list[str]:
    """A stated ci_method must be the one its samples' interval is computed by (a row that did not say is
    re-derived as rows of its day were: the seeded bootstrap)."""
    stated = t.get("ci_method", "")
    if not isinstance(stated, str) or stated in ("", IMPORTED_CI, truth.ci_method):
        return []
    return [f"{where}: {label}.ci_method {stated!r} is not how xmfu computes the interval of these samples "
            f"({truth.ci_method!r})"]


def _ci_problems(t: dict[str, Any], truth: Any, values: list[float], groups: list[int] | None, s: Settings,
                 where: str, label: str) -> list[str]:
    stated = [(name, t.get(name)) for name in ("ci95_low", "ci95_high")]
    if truth.ci_method == CI_BINOMIAL:  # exact: order statistics of the samples, no resampling
        return [f"{where}: {label}.{name} {v} is not the binomial order-statistic bound of the median of its "
                f"{truth.n} samples ({getattr(truth, name)})" for name, v in stated
                if is_number(v) and not close(v, getattr(truth, name))]
    if s.resamples is None:  # the band needs the resample count: a bound of the median still lies within the samples
        return [f"{where}: {label}.{name} {v} lies outside its samples' range [{truth.min}, {truth.max}]"
                for name, v in stated
                if is_number(v) and not truth.min * (1 - REL_TOL) <= v <= truth.max * (1 + REL_TOL)]
    if all(close(v, getattr(truth, name)) for name, v in stated if is_number(v)):
        return []  # the run's own seeded bootstrap, reproduced
    draws = median_draws(values, max(REFERENCE_DRAWS, s.resamples), groups, seed=1)
    tail = (1 - CI_LEVEL) / 2
    out = []
    for (name, value), q in zip(stated, (tail, 1 - tail), strict=True):
        if not is_number(value):
            continue
        band = ci_band(draws, q, s.resamples)
        if not within(value, band):
            out.append(f"{where}: {label}.{name} {value} is not a bootstrap bound of its samples: with "
                       f"{s.resamples} resamples it lies in [{band[0]:.6g}, {band[1]:.6g}] (tolerance: {CI_SE:g} "
                       f"standard errors of the quantile; the run's seeded draw gives {getattr(truth, name):.6g})")
    return out


