"""Re-deriving a bundle's figures from what the bundle itself holds, with the code that computed them in the run.

A forger who edits a figure consistently (its TFLOP/s, MFU and checksums recomputed) still has to agree with the
raw samples, the workload's formulas, the peak table and the paired rounds. `xmfu validate` (validator.py) calls
these checks; each returns problems naming the field, the value stated and the value re-derived.

What is re-derived, and from what:
- time_s (n, median, mean, min, max, percentiles, cv) from samples.jsonl by stats.summarize, the run's own
  function: exactly, to REL_TOL. Its CI bounds by the same seeded bootstrap; where they differ (a numpy whose
  random streams changed), within the bootstrap's Monte Carlo error, CI_SE standard errors of the quantile's rank
  (see ci_band);
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
- the variants' time statistics from their own samples, and a sustained run's steady-state windows from the
  row's samples (rederive_series.py);
- inference figures (weights and KV-cache bytes, TTFT/TPOT percentiles from the samples, MBU against the peak
  table's memory bandwidth) by the workload's own `figures`, through the front door's formulas.
FLOPs, bytes and params come from the workload's formulas, which this layer may not import: the front door hands
them in as `Formulas` (harness/cli/formulas.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import numpy as np
import yaml

from xmfu.harness.machine.peaks import lookup, match_device
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.results.schema.comparability import comparability_key
from xmfu.harness.results.statistics.speedup import paired_speedup_draws, verdict
from xmfu.harness.results.statistics.summary import (
    BOOTSTRAP_RESAMPLES,
    CI_LEVEL,
    EQUIVALENCE_MARGIN,
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


def settings_of(config_text: str) -> Settings:
    try:
        data = yaml.safe_load(config_text)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict):
        return Settings()
    timing = data.get("timing") if isinstance(data.get("timing"), dict) else {}
    resamples = timing.get("bootstrap_resamples", BOOTSTRAP_RESAMPLES if "timing" in data else None)
    return Settings(int(resamples) if _num(resamples) and resamples >= 1 else None,
                    float(data.get("equivalence_margin") or EQUIVALENCE_MARGIN),
                    _number(data.get("peak_tflops")), _number(data.get("cpu_clock_ghz")),
                    _number(timing.get("window_s")), _number(timing.get("steady_tolerance")))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def close(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) \
            or not isinstance(b, (int, float)):
        return a == b
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-300)


def same(a: Any, b: Any) -> bool:
    """Equal, numbers to REL_TOL, through dicts and lists."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return close(a, b)


def _num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def _within(value: float, band: tuple[float, float]) -> bool:
    return band[0] * (1 - REL_TOL) <= value <= band[1] * (1 + REL_TOL)


def time_problems(row: dict[str, Any], rec: dict[str, Any], s: Settings, where: str,
                  truth: Summary | None = None) -> list[str]:
    """The row's time statistics against its raw samples (the same record line of samples.jsonl). `truth`: the
    samples' statistics where `time_truths` computed them already (None: computed here)."""
    t, values = row.get("time_s"), rec.get("samples")
    return stats_problems(t, values, _repeats(rec, values), s, where, "time_s", "samples.jsonl", truth=truth)


def _repeats(rec: dict[str, Any], values: Any) -> list[int] | None:
    repeats = rec.get("repeats") if isinstance(rec.get("repeats"), list) else []
    return repeats if isinstance(values, list) and len(repeats) == len(values) else None


def time_truths(rows: list[dict[str, Any]], samples: list[dict[str, Any]], s: Settings) -> list[Summary | None]:
    """Per row, what `time_problems` re-derives its time_s from, `summarize` of its samples, computed for all rows
    at once (stats.summarize_many gives summarize's figures exactly, issue 30 item 14). None where time_problems
    computes them itself: no time or no samples to check (it says why), or samples over several repeats (the
    two-stage bootstrap, per row)."""
    out: list[Summary | None] = [None] * len(rows)
    batch, at = [], []
    for i, (row, rec) in enumerate(zip(rows, samples, strict=False)):
        values = rec.get("samples")
        groups = _repeats(rec, values)
        if isinstance(row.get("time_s"), dict) and isinstance(values, list) and values \
                and all(_num(v) and math.isfinite(v) for v in values) and len(set(groups or ())) <= 1:
            batch.append(values)
            at.append(i)
    for i, truth in zip(at, summarize_many(batch, s.resamples or BOOTSTRAP_RESAMPLES), strict=True):
        out[i] = truth
    return out


def stats_problems(t: Any, values: Any, groups: list[int] | None, s: Settings, where: str, label: str,
                   source: str, grouped: bool = True, truth: Summary | None = None) -> list[str]:
    """Time statistics `t` (named `label`) against the raw samples `values` they were computed from (`source`
    names where those are); `groups`: each sample's repeat. `grouped` False: the repeats are unknown and the
    samples span several, so the figures that depend on them (median, CI) are not checked. `truth`: summarize's
    figures of these samples, already computed (time_truths)."""
    if not isinstance(t, dict) or not isinstance(values, list):
        return []
    if not values:
        return [f"{where}: {label} is stated but {source} holds no samples for it"]
    if not all(_num(v) and math.isfinite(v) for v in values):
        return []  # named by the samples check
    out = []
    if _num(t.get("ci95_low")) and _num(t.get("ci95_high")) and t["ci95_low"] > t["ci95_high"]:
        out.append(f"{where}: {label}.ci95_low {t['ci95_low']} is above ci95_high {t['ci95_high']}")
    if _num(t.get("median")) and _num(t.get("max")) and t["median"] > t["max"]:
        out.append(f"{where}: {label}.median {t['median']} is above {label}.max {t['max']}")
    truth = truth or summarize(values, s.resamples or BOOTSTRAP_RESAMPLES, groups)
    if t.get("n") != truth.n:
        out.append(f"{where}: {label}.n is {t.get('n')} but {source} holds {truth.n} samples")
    for name in EXACT_STATS if grouped else tuple(n for n in EXACT_STATS if n != "median"):
        if name in t and not close(t[name], getattr(truth, name)):
            out.append(f"{where}: {label}.{name} {t[name]} is not the {name} of its {truth.n} samples in "
                       f"{source} ({getattr(truth, name)})")
    if grouped:
        out += _ci_problems(t, truth, values, groups, s, where, label)
    return out


def _ci_problems(t: dict[str, Any], truth: Any, values: list[float], groups: list[int] | None, s: Settings,
                 where: str, label: str) -> list[str]:
    stated = [(name, t.get(name)) for name in ("ci95_low", "ci95_high")]
    if s.resamples is None:  # the band needs the resample count: a bound of the median still lies within the samples
        return [f"{where}: {label}.{name} {v} lies outside its samples' range [{truth.min}, {truth.max}]"
                for name, v in stated if _num(v) and not truth.min * (1 - REL_TOL) <= v <= truth.max * (1 + REL_TOL)]
    if all(close(v, getattr(truth, name)) for name, v in stated if _num(v)):
        return []  # the run's own seeded bootstrap, reproduced
    draws = median_draws(values, max(REFERENCE_DRAWS, s.resamples), groups, seed=1)
    tail = (1 - CI_LEVEL) / 2
    out = []
    for (name, value), q in zip(stated, (tail, 1 - tail), strict=True):
        if not _num(value):
            continue
        band = ci_band(draws, q, s.resamples)
        if not _within(value, band):
            out.append(f"{where}: {label}.{name} {value} is not a bootstrap bound of its samples: with "
                       f"{s.resamples} resamples it lies in [{band[0]:.6g}, {band[1]:.6g}] (tolerance: {CI_SE:g} "
                       f"standard errors of the quantile; the run's seeded draw gives {getattr(truth, name):.6g})")
    return out


def _ratio(name: str, stated: Any, top: Any, bottom: Any, scale: float, where: str, what: str) -> list[str]:
    if not (_num(stated) and _num(top) and _num(bottom)) or bottom <= 0:
        return []
    expected = top / bottom / scale
    return [] if close(stated, expected) else [f"{where}: {name} {stated} is not {what} ({expected})"]


def derived_problems(row: dict[str, Any], where: str) -> list[str]:
    """Figures a row states that follow from its other figures (harness/engine/metrics.py and the workloads)."""
    t = row.get("time_s") if isinstance(row.get("time_s"), dict) else {}
    median, flops = t.get("median"), row.get("flops")
    out = []
    if _num(flops) and flops > 0:
        out += _ratio("tflops", row.get("tflops"), flops, median, 1e12, where, "flops / median time / 1e12")
    out += _ratio("mfu", row.get("mfu"), row.get("tflops"), row.get("peak_tflops"), 1, where,
                  "tflops / peak_tflops")
    out += _ratio("mfu_vs_achievable", row.get("mfu_vs_achievable"), row.get("tflops"),
                  row.get("achievable_tflops"), 1, where, "tflops / achievable_tflops")
    if _num(row.get("bytes")) and row["bytes"] > 0:
        out += _ratio("bandwidth_gbps", row.get("bandwidth_gbps"), row["bytes"], median, 1e9, where,
                      "bytes / median time / 1e9")
    ci = row.get("tflops_ci95")
    if isinstance(ci, list) and len(ci) == 2 and _num(flops) and flops > 0:
        out += _ratio("tflops_ci95[0]", ci[0], flops, t.get("ci95_high"), 1e12, where, "flops / time_s.ci95_high")
        out += _ratio("tflops_ci95[1]", ci[1], flops, t.get("ci95_low"), 1e12, where, "flops / time_s.ci95_low")
    if _num(row.get("hfu")) and _num(median) and _num(row.get("peak_tflops")):
        out += _ratio("hfu", row["hfu"], row.get("hardware_flops"), median * row["peak_tflops"], 1e12, where,
                      "hardware_flops / median time / peak")
    out += _ratio("algbw_gbps", row.get("algbw_gbps"), row.get("size_bytes_actual"), median, 1e9, where,
                  "size_bytes_actual / median time / 1e9 (nccl-tests' algbw)")
    if _num(row.get("busbw_gbps")) and _num(row.get("bus_factor")) and _num(row.get("algbw_gbps")) \
            and not close(row["busbw_gbps"], row["algbw_gbps"] * row["bus_factor"]):
        out.append(f"{where}: busbw_gbps {row['busbw_gbps']} is not algbw_gbps x bus_factor "
                   f"({row['algbw_gbps'] * row['bus_factor']})")
    out += _ratio("comm_achieved_gbps", row.get("comm_achieved_gbps"), row.get("comm_bytes_per_rank"),
                  row.get("comm_total_s"), 1e9, where, "comm_bytes_per_rank / comm_total_s / 1e9")
    return out


def status_problems(row: dict[str, Any], where: str) -> list[str]:
    """A status against the correctness record: `ok` means checked and correct, `incorrect` never has a time."""
    c, status = row.get("correctness"), row.get("status")
    out = []
    if isinstance(c, dict):
        if status == "ok" and c.get("ok") is False:
            out.append(f"{where}: status ok but correctness.ok is false (error {c.get('error')}, tolerance "
                       f"{c.get('tolerance')}): an incorrect result has no speed")
        if status == "incorrect" and c.get("ok") is True:
            out.append(f"{where}: status incorrect but correctness.ok is true")
        if c.get("ok") is True and c.get("error") is None:
            out.append(f"{where}: correctness.ok is true with no error figure (null means infinite)")
    if status != "ok" and (row.get("time_s") is not None or row.get("tflops") is not None):
        out.append(f"{where}: status {status} with a time: only an ok row is timed")
    return out


def key_problems(row: dict[str, Any], where: str, fields_required: bool) -> list[str]:
    """The row's comparability_key against the hash of its `comparability` fields (the engine's runner computes
    both with comparability.py; one definition), and those fields against the row they describe: a changed key
    would let `xmfu compare` and a history store pair rows that do not mean the same thing, or split a series.
    `fields_required`: the bundle's format has every row carry its fields (xmfu.bundle/2; /1 rows may predate
    them, and their key is then not checked)."""
    fields, stated = row.get("comparability"), row.get("comparability_key")
    if not isinstance(fields, dict):
        return [f"{where}: comparability_key {stated!r} is stated without the comparability fields it is the hash "
                f"of"] if fields_required else []
    out = []
    for name in ("workload", "params", "dtype", "flop_convention"):
        if name in row and not same(fields.get(name), row[name]):
            out.append(f"{where}: comparability.{name} {fields.get(name)!r} is not the row's {name} {row[name]!r}")
    try:
        expected = comparability_key(fields)
    except (TypeError, ValueError) as exc:  # fields json cannot hash (e.g. mixed key types)
        return [*out, f"{where}: comparability cannot be hashed ({type(exc).__name__}: {exc})"]
    if stated != expected:
        out.append(f"{where}: comparability_key {stated!r} is not the hash of the row's comparability fields "
                   f"({expected!r})")
    return out


def duplicate_problems(rows: list[dict[str, Any]], name: str) -> list[str]:
    seen: dict[tuple, int] = {}
    out = []
    for number, row in enumerate(rows, 1):
        key = (row.get("phase"), row.get("case_id"), row.get("backend"))
        if key in seen:
            out.append(f"{name} line {number} repeats line {seen[key]} (phase {key[0]}, case {key[1]}, backend "
                       f"{key[2]}): one row per (phase, case, backend)")
        seen.setdefault(key, number)
    return out


def speedup_problems(rows: list[dict[str, Any]], samples: list[dict[str, Any]], s: Settings,
                     name: str) -> list[str]:
    """Each stated speedup re-derived from the two rows' samples, paired by round (stats.paired_speedup_draws)."""
    index = {(r.get("phase"), r.get("case_id"), r.get("backend")): i for i, r in enumerate(rows)}
    out = []
    for i, (row, rec) in enumerate(zip(rows, samples, strict=False)):
        sp, where = row.get("speedup"), f"{name} line {i + 1}"
        if not isinstance(sp, dict):
            continue
        j = index.get((row.get("phase"), row.get("case_id"), sp.get("baseline")))
        if j is None or j >= len(samples):
            out.append(f"{where}: speedup against {sp.get('baseline')!r}, which has no row of this case")
            continue
        out += _one_speedup(sp, _paired(samples[j]), _paired(rec), s, where)
    return out


def _paired(rec: dict[str, Any]) -> tuple | None:
    x, rounds, repeats = rec.get("samples") or [], rec.get("rounds") or [], rec.get("repeats") or []
    if not x or len(rounds) != len(x):
        return None
    return (x, rounds, repeats) if len(repeats) == len(x) else (x, rounds)


def _one_speedup(sp: dict[str, Any], base: tuple | None, cand: tuple | None, s: Settings, where: str) -> list[str]:
    draws_n = max(REFERENCE_DRAWS, s.resamples or 0)
    found = paired_speedup_draws(base, cand, draws_n, seed=1) if base and cand else None
    if found is None:
        return [f"{where}: speedup stated, but the samples hold no round shared with the baseline"]
    value, draws, rounds, _ = found
    out = []
    if not close(sp.get("value"), value):
        out.append(f"{where}: speedup.value {sp.get('value')} is not the paired samples' speedup ({value})")
    if sp.get("rounds") != rounds:
        out.append(f"{where}: speedup.rounds {sp.get('rounds')} but the samples pair {rounds} rounds")
    low, high = sp.get("ci95_low"), sp.get("ci95_high")
    if _num(low) and _num(high):
        said = verdict(low, high, s.margin)
        if sp.get("verdict") != said:
            out.append(f"{where}: speedup.verdict {sp.get('verdict')!r} but its CI [{low}, {high}] against "
                       f"1 +- {s.margin} says {said!r}")
        tail = (1 - CI_LEVEL) / 2
        own = paired_speedup_draws(base, cand, s.resamples, seed=0) if s.resamples else None
        if own is not None and all(close(v, math.exp(float(np.quantile(own[1], q))))
                                   for v, q in ((low, tail), (high, 1 - tail))):
            return out  # the run's own seeded bootstrap (stats.paired_speedup), reproduced
        for bound, q, label in ((low, tail, "ci95_low"), (high, 1 - tail, "ci95_high")) if s.resamples else ():
            band = tuple(math.exp(v) for v in ci_band(draws, q, s.resamples))
            if bound > 0 and not _within(bound, band):
                out.append(f"{where}: speedup.{label} {bound} is not a bootstrap bound of the paired samples: it "
                           f"lies in [{band[0]:.6g}, {band[1]:.6g}] (tolerance: {CI_SE:g} standard errors)")
    return out


def _device(row: dict[str, Any], devices: list[dict[str, Any]]) -> DeviceInfo | None:
    known = {f.name for f in fields(DeviceInfo)}
    for d in devices:
        if d.get("index") == row.get("device_index", 0) and {"kind", "name", "vendor"} <= set(d):
            return DeviceInfo(**{k: v for k, v in d.items() if k in known})
    return None


def peak_problems(row: dict[str, Any], devices: list[dict[str, Any]], s: Settings, where: str) -> list[str]:
    """peak_tflops against the peak table: for the device environment.json records (the run's own lookup), and for
    the device name the row states (a name the table knows fixes the peak, whatever the rest of the row says)."""
    peak, entry = row.get("peak_tflops"), row.get("peak_entry")
    if not _num(peak) or not _num(row.get("flops")) or row["flops"] <= 0:
        return []
    out = []
    if entry == "override":
        if s.peak_override is not None and not close(peak, s.peak_override):
            out.append(f"{where}: peak_tflops {peak} is marked override but config.yaml's peak_tflops is "
                       f"{s.peak_override}")
        return out
    device = _device(row, devices)
    if device is not None and device.name != row.get("device"):
        out.append(f"{where}: device {row.get('device')!r} is not the device environment.json records at index "
                   f"{device.index} ({device.name!r})")
    elif device is not None:
        want = lookup(device, str(row.get("dtype")), cpu_clock_ghz=s.cpu_clock_ghz)
        if want.tflops is None or not close(peak, want.tflops):
            out.append(f"{where}: peak_tflops {peak} is not the peak table's for {device.name} {row.get('dtype')} "
                       f"({want.tflops}, {want.entry or want.note})")
    named, _ = match_device(DeviceInfo(kind=str(row.get("platform")), name=str(row.get("device")), vendor=""))
    if named is not None:
        value = named["tflops"].get(row.get("dtype"))
        if entry != named["id"] or value is None or peak > value * (1 + REL_TOL):
            out.append(f"{where}: device {row.get('device')!r} is {named['id']} in the peak table (dense "
                       f"{row.get('dtype')}: {value} TFLOP/s), but the row states peak_tflops {peak} from "
                       f"{entry or 'no entry'}")
    return out


def utc_time(value: Any) -> datetime | None:
    """A UTC ISO 8601 time as the writer stamps it (writer.utc_now), or None."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.utcoffset() is not None and when.utcoffset().total_seconds() == 0 else None


def time_field_problems(record: dict[str, Any], names: tuple[str, ...], where: str) -> list[str]:
    out = []
    for name in names:
        if record.get(name) is not None and utc_time(record[name]) is None:
            out.append(f"{where}: {name} {record[name]!r} is not a UTC ISO 8601 time (e.g. 2026-11-25T22:08:35Z)")
    return out


def restated_problems(row: dict[str, Any], restated: Restated, where: str) -> list[str]:
    """The row's params, FLOPs, bytes and formula figures against what its workload's formulas give."""
    if restated.problem:
        return [f"{where}: {restated.problem}"]
    out = []
    for key, want in restated.figures.items():
        if key == "comparability" and isinstance(row.get(key), dict) and not same(row[key], want):
            out.append(f"{where}: comparability.protocol {row[key].get('protocol')!r} is not the protocol "
                       f"config.yaml's timing settings give ({want.get('protocol')!r})")
        elif key in row and not same(row[key], want):
            out.append(f"{where}: {key} {row[key]!r} is not what the {row.get('workload')} workload's formula gives "
                       f"for the row's params ({want!r})")
    return out
