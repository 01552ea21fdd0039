"""`xmfu compare`: matching cases of two or more sides, with a speedup, its CI, a verdict and the variance it used.

A side is one bundle or several runs of the same configuration (`xmfu compare A1 A2 A3 -- B1 B2 B3`). Rows match
on (case id, backend) and are compared only when their comparability keys agree (else refused with the fields
that differ, unless the caller allows it). Each side's figure is the median of its run medians, where a run is
a bundle's row or one of its repeats (`repeats=N`).

What decides a verdict is run-to-run variance, not the spread of one run's samples. Its source, named in every
row: the history store's recent runs of the series (`--noise-from`) whenever it has an estimate for the series,
combined with the bundles' own spread as stats.runs_ratio_ci_store states; otherwise the runs and repeats themselves
when a side has two or more (Welch's t; a side with one run borrows the other side's variance); otherwise none, and
then a difference is called only beyond the noise floor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.schema.row import Row
from xmfu.harness.results.statistics.quantiles import repeated_quantiles
from xmfu.harness.results.statistics.speedup import judge, runs_ratio_ci, runs_ratio_ci_store, verdict
from xmfu.harness.results.statistics.summary import (
    BOOTSTRAP_RESAMPLES,
    EQUIVALENCE_MARGIN,
    distinct_resampled_medians,
)

DEFAULT_NOISE_FLOOR = 0.10  # one run per side and no noise estimate: differences under 10% are not called
RESAMPLES = BOOTSTRAP_RESAMPLES  # compare resamples as a run does
ENV_FIELDS = (  # (label, path in environment.json) whose differences can explain different numbers
    ("driver", ("driver",)), ("torch cuda", ("torch", "cuda")), ("torch hip", ("torch", "hip")),
    ("nccl", ("nccl", "version")), ("power limit W", ("telemetry", "power_limit_w")),
    ("max SM clock MHz", ("telemetry", "max_sm_clock_mhz")), ("kernel", ("host", "kernel")),
    ("BLAS library", ("torch_settings", "blas_library")), ("TunableOp", ("torch_settings", "tunableop", "enabled")),
)
Key = tuple[str, str]
Noise = Callable[[Row], tuple[float, int] | None]  # row -> (run-to-run sd of log time, runs) or None
Entry = tuple[Row, dict[str, Any]]  # a timed row and its samples record


@dataclass
class Side:
    """One side of a comparison: one or more bundles of the same configuration."""

    bundles: list[Bundle]

    @property
    def label(self) -> str:
        return "+".join(b.manifest["run_id"] for b in self.bundles)

    def rows(self) -> dict[Key, list[Entry]]:
        """(case id, backend) -> [(row, samples record)] over the side's bundles, timed rows only."""
        out: dict[Key, list[Entry]] = {}
        for b in self.bundles:
            samples = {(s["case_id"], s["backend"]): s for s in b.samples}
            for r in b.rows:
                key = (r.case_id, r.backend)
                if r.status == "ok" and r.time_s is not None and key in samples:
                    out.setdefault(key, []).append((r, samples[key]))
        return out


@dataclass
class Comparison:
    baseline: str  # label of the baseline side
    rows: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)  # why nothing matched, when nothing did
    env_diff: list[dict[str, Any]] = field(default_factory=list)


def runs_of(entries: list[Entry]) -> list[np.ndarray]:
    """The runs behind a side's figure: with several bundles, each bundle (the independent unit: repeats inside
    one are not independent of each other); with one, its repeats where it has them."""
    if len(entries) > 1:
        return [np.asarray(rec["samples"], dtype=np.float64) for _, rec in entries]
    runs = []
    for _, rec in entries:
        values = np.asarray(rec["samples"], dtype=np.float64)
        repeats = rec.get("repeats") or []
        if len(set(repeats)) > 1 and len(repeats) == values.size:
            ids = np.asarray(repeats)
            runs += [values[ids == i] for i in sorted(set(repeats))]
        else:
            runs.append(values)
    return runs


def differing_fields(a: Row, b: Row) -> list[str]:
    """Which parts of the comparability key differ (workload spec, dtype, FLOP convention, protocol)."""
    if a.comparability is None or b.comparability is None:
        return ["comparability key (one bundle predates the recorded key fields)"]
    # the key's fields as plain values, compared name by name (a plug-in's part: key by key)
    fa, fb = msgspec.to_builtins(a.comparability), msgspec.to_builtins(b.comparability)
    out = []
    for name in sorted(set(fa) | set(fb)):
        va, vb = fa.get(name), fb.get(name)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += [f"{name}.{k}: {va.get(k)!r} vs {vb.get(k)!r}" for k in sorted(set(va) | set(vb))
                    if va.get(k) != vb.get(k)]
        elif va != vb:
            out.append(f"{name}: {va!r} vs {vb!r}")
    return out


def _medians(runs: list[np.ndarray]) -> list[float]:
    return [float(np.median(r)) for r in runs]


def within_run_intervals(pairs: list[tuple[np.ndarray, np.ndarray]],
                         seed: int = 0) -> list[tuple[float, float, float]]:
    """(ratio of medians, bootstrap low, high) of baseline / candidate for each (one run, one run) pair: the
    samples' own precision, nothing more. Pairs with the same sample counts are resampled together, one
    vectorised draw per group of rows (xmfu.harness.results.statistics.summary.distinct_resampled_medians). A
    draw's ratio is one of a few hundred distinct (base median, candidate median) pairs, the same for every row of
    a group: each is divided once per row and the 95% bounds are counted from how often it was drawn
    (statistics/quantiles.py), np.quantile's figures over the full draws to the bit."""
    rng = np.random.default_rng(seed)
    out: list[tuple[float, float, float] | None] = [None] * len(pairs)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (b, c) in enumerate(pairs):
        groups.setdefault((b.size, c.size), []).append(i)
    for index in groups.values():
        base = np.sort(np.stack([pairs[i][0] for i in index]), axis=1)
        cand = np.sort(np.stack([pairs[i][1] for i in index]), axis=1)
        base_medians, base_drawn = distinct_resampled_medians(base, RESAMPLES, rng)
        cand_medians, cand_drawn = distinct_resampled_medians(cand, RESAMPLES, rng)
        width = cand_medians.shape[1]
        combos, counts = np.unique(base_drawn * width + cand_drawn, return_counts=True)
        ratios = base_medians[:, combos // width] / cand_medians[:, combos % width]
        lows, highs = repeated_quantiles(ratios, counts, [0.025, 0.975])
        values = np.median(base, axis=1) / np.median(cand, axis=1)
        for j, i in enumerate(index):
            out[i] = (float(values[j]), float(lows[j]), float(highs[j]))
    return out  # type: ignore[return-value]


def _beyond_floor(low: float, high: float, margin: float, floor: float, why_not: str) -> tuple[str, str]:
    """A verdict that calls a difference only when the whole interval clears 1 +- floor."""
    word = verdict(low, high, margin)
    if (word == "faster" and low <= 1 + floor) or (word == "slower" and high >= 1 - floor):
        return "inconclusive", why_not
    return word, (f"beyond the {100 * floor:g}% noise floor" if word in ("faster", "slower") else "")


def speedup(base: list[np.ndarray], cand: list[np.ndarray], margin: float, floor: float,
            noise: tuple[float, int, str] | None, bundles: tuple[int, int] = (1, 1),
            within: tuple[float, float, float] | None = None) -> dict[str, Any]:
    """Speedup = baseline figure / candidate figure, its 95% CI, the verdict and where its variance came from.

    Several bundles per side are independent runs: Welch's t on their log run medians decides alone. Repeats
    inside one bundle (or a history estimate) give the interval too, but repeats share one process and miss
    what differs between processes (memory and thread placement, boost state: on this project's 2-core test
    machine, 6% between processes whose repeats agreed within 4%), so between single bundles a difference
    is called only beyond `floor`. With one run per side and no estimate, the interval is the two runs' own
    bootstrap, under the same floor rule. A history estimate (`noise`), whenever there is one, is used with any
    number of runs and repeats, and the verdict needs no floor: stats.runs_ratio_ci_store states how it is
    combined with the bundles' own spread."""
    independent = bundles[0] > 1 and bundles[1] > 1
    if len(base) == 1 and len(cand) == 1 and noise is None:
        value, low, high = within or within_run_intervals([(base[0], cand[0])])[0]
        source = f"none (one run per side; noise floor {100 * floor:g}%)"
        word, why = _beyond_floor(low, high, margin, floor, "one run per side: run-to-run noise unknown")
        return {"speedup": value, "ci95_low": low, "ci95_high": high, "verdict": word, "variance_source": source,
                **({"verdict_reason": why} if why else {})}
    mb, mc = _medians(base), _medians(cand)
    if noise is not None:  # the store's between-run noise, whenever given (stats.runs_ratio_ci_store: the rule)
        value, low, high = runs_ratio_ci_store(mb, mc, bundles, (noise[0], noise[1]))
        source = f"{noise[2]}: {noise[1]} recent runs, run-to-run sd {100 * noise[0]:.1f}%" + _store_with(
            (len(mb), len(mc)), bundles)
        word, why = verdict(low, high, margin), ""
        return {"speedup": value, "ci95_low": low, "ci95_high": high, "verdict": word, "variance_source": source}
    value, low, high = runs_ratio_ci(mb, mc)
    if independent:
        source = f"{bundles[0]} and {bundles[1]} bundles per side (Welch t on log run medians)"
        word, why = verdict(low, high, margin), ""
    else:
        source = f"{len(mb)} and {len(mc)} repeats/runs per side (Welch t; repeats share a process)"
        word, why = _beyond_floor(low, high, margin, floor, "repeats share a process: a difference under "
                                  f"the {100 * floor:g}% noise floor is not called between single runs")
    out = {"speedup": value, "ci95_low": low, "ci95_high": high, "verdict": word, "variance_source": source}
    if why:
        out["verdict_reason"] = why
    return out


def _store_with(runs: tuple[int, int], bundles: tuple[int, int]) -> str:
    """What the store's noise was combined with on each side (stats.runs_ratio_ci_store), for variance_source."""
    said = []
    for label, n, count in (("baseline", runs[0], bundles[0]), ("candidate", runs[1], bundles[1])):
        if count > 1:
            said.append(f"{label} {count} bundles, pooled with the store")
        elif n > 1:
            said.append(f"{label} {n} repeats in one bundle (one run; its repeats count where they vary more)")
    return "; " + ", ".join(said) if said else ""


def _check_keys(ref: Row, entries: list[Entry]) -> list[str]:
    return next((differing_fields(ref, r) for r, _ in entries if r.comparability_key != ref.comparability_key), [])


def compare_sides(base: Side, other: Side, result: Comparison, allow_incomparable: bool, margin: float,
                  floor: float, noise: Noise | None, strict: bool = False) -> int:
    """Append the matching rows of `other` against `base`; returns how many keys matched at all. A row that
    either side's run marked contended gets the verdict `inconclusive` (reason `contended`) unless `strict`."""
    base_rows, other_rows = base.rows(), other.rows()
    todo = []
    for key, entries in other_rows.items():
        ref_entries = base_rows.get(key)
        if not ref_entries:
            continue
        ref = ref_entries[0][0]
        diff = _check_keys(ref, ref_entries[1:] + entries)
        if diff and not allow_incomparable:
            result.refused.append({"case_id": key[0], "backend": key[1], "run_id": other.label, "differs": diff})
            continue
        estimate = noise(ref) if noise else None
        todo.append((key, ref_entries, entries, diff, runs_of(ref_entries), runs_of(entries),
                     (*estimate, "history store") if estimate else None))
    single = [i for i, t in enumerate(todo) if len(t[4]) == 1 and len(t[5]) == 1 and t[6] is None]
    intervals = dict(zip(single, within_run_intervals([(todo[i][4][0], todo[i][5][0]) for i in single]),
                         strict=True))
    for i, (key, ref_entries, entries, diff, b_runs, c_runs, estimate) in enumerate(todo):
        stats = speedup(b_runs, c_runs, margin, floor, estimate, (len(ref_entries), len(entries)), intervals.get(i))
        if noise and estimate is None:  # --noise-from was given: say why it did not decide this row
            stats["variance_source"] += " (--noise-from: too few runs of this series in the history store)"
        contended = _contended(ref_entries + entries)
        if contended and not strict:  # a run that says it was disturbed is no evidence either way (stats.judge)
            word, why = judge(stats["ci95_low"], stats["ci95_high"], margin, contended=True)
            stats.update(verdict=word, verdict_reason=why)
        ref, row = ref_entries[0][0], entries[0][0]
        result.rows.append({"case_id": key[0], "backend": key[1], "baseline_run": base.label, "run": other.label,
                            "baseline_median_s": ref.time_s.median, "median_s": row.time_s.median,
                            **stats, "mfu": row.mfu, "baseline_mfu": ref.mfu,
                            "incomparable": diff or None, "contended": contended,
                            "timing_valid": row.timing_valid and ref.timing_valid})
    return len(todo) + sum(1 for r in result.refused if r["run_id"] == other.label)


def _contended(entries: list[Entry]) -> list[str] | None:
    """The runs measured while another process competed for the device (flagged by the run itself)."""
    found = [f"{r.run_id}: {_why_contended(r.contention.reason)}" for r, _ in entries
             if r.contention is not None and r.contention.contended]
    return found or None


def _why_contended(reason: str | None) -> str:
    """A contended row names why; one that does not says only that it was."""
    return reason if reason is not None else "contended"


def _unmatched(base: Side, other: Side) -> list[str]:
    """Why no case of `other` matches `base`: the keys each side has."""
    a, b = base.rows(), other.rows()
    what = lambda rows: sorted({f"{r.workload} {r.dtype}" for e in rows.values() for r, _ in e})  # noqa: E731
    return [f"{base.label} has {', '.join(what(a)) or 'no timed rows'} ({len(a)} case/backend pairs); "
            f"{other.label} has {', '.join(what(b)) or 'no timed rows'} ({len(b)}): no (case id, backend) in common"]


def compare(sides: Sequence[Side], baseline: int = 0, allow_incomparable: bool = False,
            margin: float = EQUIVALENCE_MARGIN, floor: float = DEFAULT_NOISE_FLOOR,
            noise: Noise | None = None, strict: bool = False) -> Comparison:
    base = sides[baseline]
    result = Comparison(base.label)
    for i, other in enumerate(sides):
        if i != baseline and compare_sides(base, other, result, allow_incomparable, margin, floor, noise,
                                           strict) == 0:
            result.unmatched += _unmatched(base, other)
    result.env_diff = environment_diff({b.manifest["run_id"]: b.environment() for s in sides for b in s.bundles})
    return result


def _dig(data: Any, path: Sequence[str]) -> Any:
    for part in path:
        data = data.get(part) if isinstance(data, dict) else None
    return data


def environment_diff(envs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Conditions that differ between bundles: versions, driver, clocks, power limits, BLAS, variables."""
    names = list(envs)
    out = []

    def add(label: str, values: dict[str, Any]) -> None:
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            out.append({"field": label, **values})

    for label, path in ENV_FIELDS:
        add(label, {n: _dig(envs[n], path) for n in names})
    for package in sorted({p for e in envs.values() for p in (e.get("packages") or {})}):
        add(f"package {package}", {n: (envs[n].get("packages") or {}).get(package) for n in names})
    add("device", {n: [d.get("name") for d in envs[n].get("devices", [])] for n in names})
    for var in sorted({v for e in envs.values() for v in (e.get("env") or {})}):
        add(f"env {var}", {n: (envs[n].get("env") or {}).get(var) for n in names})
    return out
