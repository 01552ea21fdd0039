"""A row's own figures re-derived: rates, utilisation and bandwidth from its time, the status from its check, the
comparability key from its fields, the speedups from both rows' samples, the peak from the peak table, its times
as UTC, and what the workload's formulas restate (see times.py for the time statistics)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime
from typing import Any

import numpy as np

from xmfu.harness.machine.peaks import lookup, match_device
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.results.rederive.times import (
    CI_SE,
    REFERENCE_DRAWS,
    REL_TOL,
    Restated,
    Settings,
    ci_band,
    close,
    finite_numbers,
    is_number,
    same,
    within,
)
from xmfu.harness.results.schema import achievable
from xmfu.harness.results.schema.comparability import comparability_key
from xmfu.harness.results.statistics.paired_bounds import paired_speedup_bounds
from xmfu.harness.results.statistics.speedup import (
    MIN_ROUNDS,
    judge,
    paired_speedup_draws,
    verdict,
)
from xmfu.harness.results.statistics.summary import (
    CI_LEVEL,
)


def _ratio(name: str, stated: Any, top: Any, bottom: Any, scale: float, where: str, what: str) -> list[str]:
    if stated is None or not (is_number(stated) and is_number(top) and is_number(bottom)) or bottom <= 0:
        return []  # (most rows leave most ratios null: the first test ends those)
    expected = top / bottom / scale
    return [] if close(stated, expected) else [f"{where}: {name} {stated} is not {what} ({expected})"]


def derived_problems(row: dict[str, Any], where: str) -> list[str]:
    """Figures a row states that follow from its other figures (harness/engine/metrics.py and the workloads)."""
    t = row.get("time_s") if isinstance(row.get("time_s"), dict) else {}
    median, flops = t.get("median"), row.get("flops")
    out = []
    if is_number(flops) and flops > 0:
        out += _ratio("tflops", row.get("tflops"), flops, median, 1e12, where, "flops / median time / 1e12")
    out += _ratio("mfu", row.get("mfu"), row.get("tflops"), row.get("peak_tflops"), 1, where,
                  "tflops / peak_tflops")
    out += _ratio("mfu_vs_achievable", row.get("mfu_vs_achievable"), row.get("tflops"),
                  row.get("achievable_tflops"), 1, where, "tflops / achievable_tflops")
    if is_number(row.get("bytes")) and row["bytes"] > 0:
        out += _ratio("bandwidth_gbps", row.get("bandwidth_gbps"), row["bytes"], median, 1e9, where,
                      "bytes / median time / 1e9")
    ci = row.get("tflops_ci95")
    if isinstance(ci, list) and len(ci) == 2 and is_number(flops) and flops > 0:
        out += _ratio("tflops_ci95[0]", ci[0], flops, t.get("ci95_high"), 1e12, where, "flops / time_s.ci95_high")
        out += _ratio("tflops_ci95[1]", ci[1], flops, t.get("ci95_low"), 1e12, where, "flops / time_s.ci95_low")
    if is_number(row.get("hfu")) and is_number(median) and is_number(row.get("peak_tflops")):
        out += _ratio("hfu", row["hfu"], row.get("hardware_flops"), median * row["peak_tflops"], 1e12, where,
                      "hardware_flops / median time / peak")
    out += _ratio("algbw_gbps", row.get("algbw_gbps"), row.get("size_bytes_actual"), median, 1e9, where,
                  "size_bytes_actual / median time / 1e9 (nccl-tests' algbw)")
    if is_number(row.get("busbw_gbps")) and is_number(row.get("bus_factor")) and is_number(row.get("algbw_gbps")) \
            and not close(row["busbw_gbps"], row["algbw_gbps"] * row["bus_factor"]):
        out.append(f"{where}: busbw_gbps {row['busbw_gbps']} is not algbw_gbps x bus_factor "
                   f"({row['algbw_gbps'] * row['bus_factor']})")
    out += _ratio("comm_achieved_gbps", row.get("comm_achieved_gbps"), row.get("comm_bytes_per_rank"),
                  row.get("comm_total_s"), 1e9, where, "comm_bytes_per_rank / comm_total_s / 1e9")
    return out + _achievable_problems(row, where)


def _achievable_problems(row: dict[str, Any], where: str) -> list[str]:
    """`mfu_vs_achievable_reason` as the row's own fields give it (schema.achievable.reason: the row's timing
    method against the achievable figure's, a ratio above 1): a caveat edited away, or one stated falsely, is
    named. Rows written before the field have no key, and their flags are read from the figures alone."""
    if "mfu_vs_achievable_reason" not in row:
        return []
    ratio, timer = row.get("mfu_vs_achievable"), row.get("timer")
    timed = achievable.timed_method(timer.get("flush_l2_bytes") if isinstance(timer, dict) else None,
                                    isinstance(timer, dict))
    said = achievable.reason(ratio if is_number(ratio) else None, timed, row.get("achievable_method"))
    if row["mfu_vs_achievable_reason"] == said:
        return []
    return [f"{where}: mfu_vs_achievable_reason {row['mfu_vs_achievable_reason']!r} but the row's figures (mfu_vs_"
            f"achievable {ratio}, timed {timed}, achievable_method {row.get('achievable_method')!r}) say {said!r}"]


def status_problems(row: dict[str, Any], where: str) -> list[str]:
    """A status against the correctness records: `ok` means checked and correct before timing and, where the last
    timed output was re-checked (`timed_check`), after it; `incorrect` never has a time."""
    c, status, t = row.get("correctness"), row.get("status"), row.get("timed_check")
    out = []
    recheck_failed = isinstance(t, dict) and t.get("ok") is False
    if status == "ok" and recheck_failed:
        out.append(f"{where}: status ok but timed_check.ok is false (error {t.get('error')}, tolerance "
                   f"{t.get('tolerance')}): the timed calls' output was wrong")
    if isinstance(c, dict):
        if status == "ok" and c.get("ok") is False:
            out.append(f"{where}: status ok but correctness.ok is false (error {c.get('error')}, tolerance "
                       f"{c.get('tolerance')}): an incorrect result has no speed")
        if status == "incorrect" and c.get("ok") is True and not recheck_failed:
            out.append(f"{where}: status incorrect but correctness.ok is true (and no timed_check failed)")
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
        if name in row and fields.get(name) != row[name] and not same(fields.get(name), row[name]):
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
                     name: str, seconds: bool = False) -> list[str]:
    """Each stated speedup re-derived from the two rows' samples, paired by round (stats.paired_speedup_draws; the
    run's own seeded draws of every row at once, paired_bounds.paired_speedup_bounds). `seconds`: every sample of the
    bundle is known to be a finite, non-negative float."""
    index = {(r.get("phase"), r.get("case_id"), r.get("backend")): i for i, r in enumerate(rows)}
    out: list[str] = []
    stated: list[tuple[dict[str, Any], tuple | None, tuple | None, str, bool]] = []
    for i, (row, rec) in enumerate(zip(rows, samples, strict=False)):
        sp, where = row.get("speedup"), f"{name} line {i + 1}"
        if not isinstance(sp, dict):
            continue
        j = index.get((row.get("phase"), row.get("case_id"), sp.get("baseline")))
        if j is None or j >= len(samples):
            out.append(f"{where}: speedup against {sp.get('baseline')!r}, which has no row of this case")
            continue
        contended = any((r.get("contention") or {}).get("contended") for r in (row, rows[j]))
        base, cand = _paired(samples[j]), _paired(rec)
        if not seconds and any(p is not None and not (finite_numbers(p[0]) and min(p[0]) >= 0) for p in (base, cand)):
            continue  # samples that are not finite seconds: the samples check names them
        stated.append((sp, base, cand, where, contended))
    # The run's own seeded bootstrap first (stats.paired_speedup: seed 0, the config's resamples): its value and
    # paired rounds do not depend on the draws, and a genuine CI is its quantiles.
    drawn = [(base, cand) for _, base, cand, _, _ in stated if base and cand]
    owns = iter(paired_speedup_bounds(drawn, s.resamples or 1, (TAIL, 1 - TAIL), seed=0))
    for sp, base, cand, where, contended in stated:
        own = next(owns) if base and cand else None
        out += _one_speedup(sp, base, cand, own, s, where, contended)
    return out


def _paired(rec: dict[str, Any]) -> tuple | None:
    x, rounds, repeats = rec.get("samples") or [], rec.get("rounds") or [], rec.get("repeats") or []
    if not x or len(rounds) != len(x):
        return None
    return (x, rounds, repeats) if len(repeats) == len(x) else (x, rounds)


TAIL = (1 - CI_LEVEL) / 2  # the quantile of a 95% interval's lower bound (summary.ci_bounds)


def _one_speedup(sp: dict[str, Any], base: tuple | None, cand: tuple | None,
                 own: tuple[float, np.ndarray, int] | None, s: Settings, where: str,
                 contended: bool = False) -> list[str]:
    """One stated speedup against `own`, the run's seeded bootstrap of the pair (value, its draws' TAIL and 1-TAIL
    quantiles, paired rounds). The 8,000-draw reference the tolerance band is read from is drawn only for a CI it
    does not reproduce (drawn for every row, it was 8 of every 9 draws a bundle's speedups cost: issue 42 item 5)."""
    if own is None:
        return [f"{where}: speedup stated, but the samples hold no round shared with the baseline"]
    value, own_bounds, rounds = own
    out = []
    if not close(sp.get("value"), value):
        out.append(f"{where}: speedup.value {sp.get('value')} is not the paired samples' speedup ({value})")
    if sp.get("rounds") != rounds:
        out.append(f"{where}: speedup.rounds {sp.get('rounds')} but the samples pair {rounds} rounds")
    low, high = sp.get("ci95_low"), sp.get("ci95_high")
    if is_number(low) and is_number(high):
        out += _verdict_problems(sp, low, high, rounds, contended, s.margin, where)
        if not s.resamples:
            return out  # the band needs the resample count
        if all(close(v, math.exp(float(b))) for v, b in zip((low, high), own_bounds, strict=True)):
            return out  # the run's own seeded bootstrap (stats.paired_speedup), reproduced
        draws = paired_speedup_draws(base, cand, max(REFERENCE_DRAWS, s.resamples), seed=1)[1]
        for bound, q, label in ((low, TAIL, "ci95_low"), (high, 1 - TAIL, "ci95_high")):
            band = tuple(math.exp(v) for v in ci_band(draws, q, s.resamples))
            if bound > 0 and not within(bound, band):
                out.append(f"{where}: speedup.{label} {bound} is not a bootstrap bound of the paired samples: it "
                           f"lies in [{band[0]:.6g}, {band[1]:.6g}] (tolerance: {CI_SE:g} standard errors)")
    return out


def _verdict_problems(sp: dict[str, Any], low: float, high: float, rounds: int, contended: bool, margin: float,
                      where: str) -> list[str]:
    """The stated verdict against the rule it was drawn under: stats.judge (no verdict when contended or from fewer
    than min_rounds rounds, at least MIN_ROUNDS) where the row names min_rounds; the CI alone in rows before it."""
    if "min_rounds" not in sp:
        said, why = verdict(low, high, margin), None
    elif not (isinstance(sp["min_rounds"], int) and sp["min_rounds"] >= MIN_ROUNDS):
        return [f"{where}: speedup.min_rounds {sp['min_rounds']!r} is below the rule's {MIN_ROUNDS}"]
    else:
        said, why = judge(low, high, margin, rounds, contended, sp["min_rounds"])
    if sp.get("verdict") != said or sp.get("verdict_reason") != why:
        return [f"{where}: speedup.verdict {sp.get('verdict')!r} ({sp.get('verdict_reason') or 'no reason'}) but its "
                f"CI [{low}, {high}] against 1 +- {margin}, {rounds} rounds"
                f"{', contended' if contended else ''} say {said!r} ({why or 'no reason'})"]
    return []


_DEVICE_FIELDS = frozenset(f.name for f in fields(DeviceInfo))


def recorded_device(row: dict[str, Any], devices: list[dict[str, Any]]) -> DeviceInfo | None:
    for d in devices:
        if d.get("index") == row.get("device_index", 0) and {"kind", "name", "vendor"} <= set(d):
            return DeviceInfo(**{k: v for k, v in d.items() if k in _DEVICE_FIELDS})
    return None


def memoized(memo: dict[Any, Any] | None, key: Any, make: Callable[[], Any]) -> Any:
    """make(), remembered in `memo` (one bundle's: its devices and settings fixed) under `key` where it hashes."""
    if memo is None:
        return make()
    try:
        if key in memo:
            return memo[key]
    except TypeError:  # a forged value that does not hash (a list where an index belongs): computed each time
        return make()
    memo[key] = value = make()
    return value


def version_problems(row: dict[str, Any], packages: dict[str, Any] | None, where: str) -> list[str]:
    """The framework versions a row states it ran on (`versions`) against environment.json's installed `packages`:
    both are read from the same installed metadata during the run, so they differ only where one was edited (an
    environment recording no packages at all, as a test's or an API caller's may, contradicts nothing)."""
    stated = row.get("versions")
    if not isinstance(stated, dict) or packages is None:  # an environment that records no packages states nothing
        return []
    return [f"{where}: versions.{name} {version!r} is not environment.json's packages.{name} "
            f"{packages.get(name)!r}: the row and the environment state different software stacks"
            for name, version in sorted(stated.items()) if packages.get(name) != version]


def peak_problems(row: dict[str, Any], devices: list[dict[str, Any]], s: Settings, where: str,
                  memo: dict[Any, Any] | None = None) -> list[str]:
    """peak_tflops against the peak table: for the device environment.json records (the run's own lookup), and for
    the device name the row states (a name the table knows fixes the peak, whatever the rest of the row says).
    `memo`: one bundle's (the same `devices` and `s` for each of its rows), so each device and dtype is looked up
    once per bundle, not once per row."""
    peak, entry = row.get("peak_tflops"), row.get("peak_entry")
    if not is_number(peak) or not is_number(row.get("flops")) or row["flops"] <= 0:
        return []
    out = []
    if entry == "override":
        if s.peak_override is not None and not close(peak, s.peak_override):
            out.append(f"{where}: peak_tflops {peak} is marked override but config.yaml's peak_tflops is "
                       f"{s.peak_override}")
        return out
    index, dtype = row.get("device_index", 0), str(row.get("dtype"))
    device = memoized(memo, ("device", type(index), index), lambda: recorded_device(row, devices))
    if device is not None and device.name != row.get("device"):
        out.append(f"{where}: device {row.get('device')!r} is not the device environment.json records at index "
                   f"{device.index} ({device.name!r})")
    elif device is not None:
        want = memoized(memo, ("peak", type(index), index, dtype),
                        lambda: lookup(device, dtype, cpu_clock_ghz=s.cpu_clock_ghz))
        if want.tflops is None or not close(peak, want.tflops):
            out.append(f"{where}: peak_tflops {peak} is not the peak table's for {device.name} {row.get('dtype')} "
                       f"({want.tflops}, {want.entry or want.note})")
    platform, name = str(row.get("platform")), str(row.get("device"))
    named, _ = memoized(memo, ("named", platform, name),
                        lambda: match_device(DeviceInfo(kind=platform, name=name, vendor="")))
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
