"""The gate replayed (issue 38, item 6): a store built from the committed reference bundles (results/reference/,
real rows of a 2-core CPU), eight nights of each series with run-to-run noise drawn from the spread measured for it,
and on the last night planted changes (10%, 25%, 2x), a toolchain bump and a lost series. Every planted change at or
above its series' stated detectable change is reported (by `history changes` and as a regression by the states),
none below it is, and the toolchain bump is attributed."""

from __future__ import annotations

import math
import statistics
from datetime import timedelta
from pathlib import Path

import pytest
from msgspec.structs import replace

from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.history import changes, judge, parquet, power, states, streak
from xmfu.harness.results.history.stored import Stored

np = pytest.importorskip("numpy")

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "cpu-amd-epyc-2core"
PLANTS = (0.0, 0.10, 0.25, 0.5)  # the figure's drop on the last night: none, 10%, 25%, 2x slower
NIGHTS = 8  # 7 baseline runs (the rule's window) and the night the changes are planted in
LOST = "matmul-bf16-1024x1024x1024-NN"  # not run on the last night


def _reference_rows() -> list[Stored]:
    rows = []
    for folder in sorted(p.parent for p in REFERENCE.glob("*/manifest.json")):
        bundle = read_bundle(folder)
        rows += parquet.flatten(bundle, bundle.environment())
    return rows


def _metric(r: Stored) -> str:
    return "busbw_gbps" if r.busbw_gbps is not None else "tflops"


def _spreads(rows: list[Stored]) -> dict[tuple, float]:
    """Each series' measured spread (of log median time): between its runs where the reference holds several (the
    sample sd of their logs: 1.5% for the 2048^3 bf16 matmuls, 55% to 190% for the CPU all_reduces), else its row's
    own CV (the samples within its one run)."""
    found = judge.series(rows, "median_s")
    return {key: statistics.stdev(math.log(v) for _, v in points) if len(points) > 1 else
            next(r.cv for r in rows if r.key() == key and r.cv is not None)
            for key, points in found.items()}


def _replayed() -> tuple[list[Stored], dict[tuple, float]]:
    """(the replay store's rows, series -> the drop planted on the last night)."""
    rows = [r for r in _reference_rows() if r.status == "ok" and r.timing_valid and r.median_s
            and (r.tflops or r.busbw_gbps)]
    templates = {r.key(): r for r in rows}  # each series' latest reference row
    spread, rng, planted = _spreads(rows), np.random.default_rng(38), {}
    out = []
    start = templates[next(iter(templates))].created + timedelta(days=30)
    for i, (key, t) in enumerate(templates.items()):
        planted[key] = PLANTS[i % len(PLANTS)]
        for night in range(NIGHTS):
            last = night == NIGHTS - 1
            if last and key[1] == LOST:
                continue
            grow = math.exp(rng.normal(0.0, spread[key])) / ((1 - planted[key]) if last else 1.0)  # the time's
            out.append(replace(t, run_id=f"replay{night}", created=start + timedelta(days=night), suite_id="",
                               contended=False, contention="", flags="", torch="2.14.0" if last else t.torch,
                               median_s=t.median_s * grow, tflops=t.tflops and t.tflops / grow,
                               busbw_gbps=t.busbw_gbps and t.busbw_gbps / grow, mfu=t.mfu and t.mfu / grow,
                               ci95_low_s=t.ci95_low_s and t.ci95_low_s * grow,
                               ci95_high_s=t.ci95_high_s and t.ci95_high_s * grow))
    return out, {k: v for k, v in planted.items() if k[1] != LOST}


def test_every_planted_change_at_or_above_its_detectable_change_is_reported_and_none_below():
    rows, planted = _replayed()
    (found,) = changes.changes(rows)
    reported = {(m.label, m.metric) for m in found.moved if m.worse}  # a planted change is for the worse
    keys = list({r.key() for r in rows})
    seen = {"at or above": 0, "below": 0}
    for key, drop in planted.items():
        metric = _metric(next(r for r in rows if r.key() == key))
        (stated,) = [p for p in power.powers(rows, metric) if p.key == key]
        label = judge.series_label(key, keys)
        if drop == 0:
            assert (label, metric) not in reported, label
            continue
        change = drop if metric not in judge.LOWER_IS_BETTER else 1 / (1 - drop) - 1
        above = change >= stated.detectable
        seen["at or above" if above else "below"] += 1
        assert ((label, metric) in reported) == above, (label, drop, stated.detectable)
        state = next(s for s in states.states(rows, metric, judge.check(rows, metric)) if s.key == key)
        if above:  # a regression, unless the row's own CI or CV is as wide as the change (its spread, not the runs')
            assert state.state == states.REGRESSION or (state.state == states.NOT_JUDGED
                                                        and "run-to-run" not in state.why), (label, drop, state)
        else:  # below: never a regression (within the noise, or labelled noisy)
            assert state.state != states.REGRESSION, (label, drop, state)
    assert seen == {"at or above": 16, "below": 52}, seen  # the replay holds both kinds (seeded: these counts)


def test_the_toolchain_bump_and_the_lost_series_are_attributed():
    rows, _ = _replayed()
    (found,) = changes.changes(rows)
    assert found.toolchain == [("torch", "2.13.0+cpu", "2.14.0")]  # the reference runs' torch, then the bump
    assert any(LOST in cell and why == "not run" for cell, why in found.lost)
    worst = next(m for m in found.moved if m.worse)  # its issue names the bump between its last good and first bad run
    ((key, label),) = streak.matching(rows, worst.metric, worst.label)
    report = streak.streak(rows, key, label, worst.metric)
    assert report.first_bad.run_id == f"replay{NIGHTS - 1}" and [w for w, _, _ in report.toolchain] == ["torch"]
