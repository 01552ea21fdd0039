"""One point per case across runs in the report's plots (issue 30, item 14): harness/results/analysis/merge_runs.py."""

from __future__ import annotations

import re

import pytest
from msgspec import structs

from tests.results.rows import matmul_row, write_bundle
from xmfu.harness.results.analysis import merge_runs
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.render import report


def _runs(count, size=256, **fields):
    return [typed(matmul_row(size, size, size, run_id=f"night-{i:03d}", **fields)) for i in range(count)]


def _scaled(row, factor):
    """The row as if its run were `factor` times as fast (its TFLOP/s and CI scaled)."""
    return structs.replace(row, tflops=row.tflops * factor, mfu=row.mfu * factor,
                           tflops_ci95=[v * factor for v in row.tflops_ci95])


def test_one_case_from_several_runs_is_one_point_the_median_with_whiskers_over_their_cis():
    base = _runs(3)
    missed = typed(matmul_row(256, 256, 256, run_id="night-001", timer={"ci_target_met": False}))
    rows = [_scaled(base[0], 1.0), _scaled(missed, 1.2), _scaled(base[2], 0.9)]
    single = typed(matmul_row(512, 512, 512))
    points, sentence = merge_runs.merge([*rows, single])
    assert len(points) == 2 and points[1] is single  # a case of one run is drawn as it was
    point = points[0]
    assert point.tflops == pytest.approx(base[0].tflops)  # the median of 0.9x, 1x, 1.2x
    assert point.mfu == pytest.approx(point.tflops / point.peak_tflops)
    assert point.tflops_ci95 == [rows[2].tflops_ci95[0], rows[1].tflops_ci95[1]]
    assert point.run_id == "3 runs" and merge_runs.flags_text(point) == "CI missed 1/3"
    assert point.merged_runs == 3 and point.case_id == base[0].case_id
    assert sentence == "1 points are each the median of one case across 3 runs (3 rows); their whiskers span " \
                       "the runs' 95% CIs"


def test_rows_that_differ_in_more_than_their_run_are_never_merged():
    one = _runs(1)[0]
    others = [structs.replace(one, run_id="b", comparability_key="another protocol"),
              structs.replace(one, run_id="c", device_index=1),
              structs.replace(one, run_id="d", peak_tflops=200.0), structs.replace(one, run_id="e", dtype="fp16"),
              structs.replace(one, run_id="f", params={**one.params, "transpose_a": True})]
    points, sentence = merge_runs.merge([one, *others])
    assert points == [one, *others] and sentence == ""


def test_a_report_over_many_runs_draws_each_case_once_and_says_so(tmp_path):
    bundles = [write_bundle(tmp_path, f"night-{i:03d}", [matmul_row(s, s, s) for s in (256, 512, 1024)],
                            created=f"2026-11-{1 + i:02d}T00:00:00.000000Z") for i in range(25)]
    html = report.build(bundles, [{}] * len(bundles), {})
    texts = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", html))
    assert "showing" not in html  # 75 rows were 60 bars and 25 run-split lines (20 drawn)
    said = "3 points are each the median of one case across 25 runs (75 rows)"
    assert texts.count(said) == 3  # the MFU, TFLOP/s and roofline figures
    assert html.count("<td>night-0") == 75 + 25  # the table keeps every row; the runs table names each run
