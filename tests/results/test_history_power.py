"""What the gate can see (issue 38, item 1): each judged series' detectable change, derived from its baseline runs
and held against what `check` actually calls a regression; the summary line; the check output and the page."""

from __future__ import annotations

import statistics

import pytest
from msgspec.structs import asdict, replace

from xmfu.harness.results.history import judge, parquet, power
from xmfu.harness.results.history.stored import Stored

pytest.importorskip("pyarrow", exc_type=ImportError)

NOISY = [100, 105, 95, 102, 97, 104, 96]  # runs about 4% apart (sd of the logs 0.0398)
STEADY = [100, 100.2, 99.8, 100, 100.1, 99.9, 100]  # runs 0.15% apart


def _rows(values, metric="tflops", case_id="c"):
    """One stored matmul row per value of `metric`, a night apart, each run sure of itself (CI and CV 1%)."""
    return [Stored(run_id=f"{case_id}{i}", created=parquet.when(f"2026-11-{i + 1:02d}T00:00:00Z"), workload="matmul",
                   case_id=case_id, backend="torch", device="GPU A", platform="cuda", dtype="bf16", status="ok",
                   timing_valid=True, comparability_key="k", cv=0.01, ci95_low_s=0.99, ci95_high_s=1.01,
                   **({"median_s": v} if metric == "median_s" else {"median_s": 1.0, metric: v}))
            for i, v in enumerate(values)]


def test_a_series_with_known_noise_gives_the_expected_bound():
    """By hand, for NOISY: median 100, MAD 4, so the rule's bound is 3 x 1.4826 x 4 / 100 = 17.8%; the logs' mean
    4.60306 (geometric mean 99.78) and sd 0.03980, t(1 - 1e-4, 6) x sqrt(1 + 1/7) = 8.58, bound 0.3415: a drop
    below 99.78 x exp(-0.3415) = 70.92 (-29.1%), or a time above 99.78 x exp(0.3415) = 140.4 (+40.4%)."""
    assert power.detectable(NOISY, "tflops") == (pytest.approx(0.1779, abs=1e-4), pytest.approx(0.2908, abs=1e-3))
    assert power.detectable(NOISY, "median_s") == (pytest.approx(0.1779, abs=1e-4), pytest.approx(0.4040, abs=1e-3))
    (found,) = power.powers(_rows([*NOISY, 100]), "tflops")
    assert found.runs == 7 and found.detectable == pytest.approx(0.2908, abs=1e-3)
    assert found.text() == "detects >= 29.1%" and not found.can_detect(0.10) and found.can_detect(0.30)
    (steady,) = power.powers(_rows([*STEADY, 100]), "tflops")
    assert steady.detectable == pytest.approx(0.02) and steady.rule_bound == pytest.approx(0.02)  # the 2% floor


@pytest.mark.parametrize("metric", ["tflops", "median_s"])
@pytest.mark.parametrize("values", [NOISY, STEADY, [100, 101, 99, 100, 102, 98]])
def test_the_stated_bound_is_where_check_starts_calling_a_regression(metric, values):
    """The bound computed the other way: by what `check` does with a latest run just beyond it (a regression, no
    label) and just within it (not flagged, or labelled noisy)."""
    bound = power.powers(_rows([*values, 100], metric), metric)[0].detectable
    sign = 1 if metric in judge.LOWER_IS_BETTER else -1
    base = statistics.median(values)
    beyond = judge.check(_rows([*values, base * (1 + sign * bound * 1.01)], metric), metric)
    assert len(beyond) == 1 and judge.worse(metric, beyond[0]["change"]) and not beyond[0].get("unreliable")
    within = judge.check(_rows([*values, base * (1 + sign * bound * 0.99)], metric), metric)
    assert within == [] or within[0]["unreliable"] == "noisy"


def test_the_summary_counts_series_that_can_and_cannot_see_the_change_and_those_too_young():
    rows = [*_rows([*NOISY, 100], case_id="noisy"), *_rows([*STEADY, 100], case_id="steady"),
            *_rows([100, 100, 100], case_id="young")]
    found = power.powers(rows, "tflops")
    line = power.summary(found, len(judge.insufficient(rows, "tflops"))).line()
    assert line == "1 series can detect a 10% change, 1 cannot (noise), 1 have too few runs"
    assert power.summary(found, 1, 0.3).line().startswith("2 series can detect a 30% change, 0 cannot")


def test_a_huge_bound_is_also_said_as_a_factor():
    wild = [100, 30, 100, 31, 99, 29, 100]
    (found,) = power.powers(_rows([*wild, 100]), "tflops")
    assert found.detectable > 0.5 and "x slowdown)" in found.text()
    assert power.slowdown("tflops", 0.5) == 2 and power.slowdown("median_s", 1.0) == 2


def _store(tmp_path, series):
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = tmp_path / "store"
    store.mkdir()
    for case_id, values in series.items():
        for row in _rows(values, case_id=case_id):
            pq.write_table(pa.Table.from_pylist([asdict(replace(row, run_id=f"{case_id}-{row.run_id}"))],
                                                schema=parquet.schema()), store / f"{case_id}-{row.run_id}.parquet")
    return store


def test_check_and_the_page_state_each_series_detectable_change(tmp_path, cli):
    store = _store(tmp_path, {"noisy": [*NOISY, 100], "steady": [*STEADY, 100], "young": [100, 100]})
    check = cli("history", "check", "--store", str(store), "--metric", "tflops")
    assert check.returncode == 0, check.stdout
    assert ("matmul noisy torch GPU A bf16 tflops: detects >= 29.1%; cannot detect a 10% change (run-to-run noise)"
            in check.stdout)
    assert "matmul steady torch GPU A bf16 tflops: detects >= 2.0%\n" in check.stdout
    assert "1 series can detect a 10% change, 1 cannot (noise), 1 have too few runs" in check.stdout
    wide = cli("history", "check", "--store", str(store), "--metric", "tflops", "--detect", "0.5")
    assert "2 series can detect a 50% change, 0 cannot (noise), 1 have too few runs" in wide.stdout
    bad = cli("history", "check", "--store", str(store), "--detect", "0")
    assert bad.returncode == 2 and "--detect" in bad.stderr and bad.stderr.count("\n") == 1
    page = cli("history", "report", "--store", str(store), "-o", str(tmp_path / "h.html"), "--detect", "0.25")
    assert page.returncode == 0
    html = (tmp_path / "h.html").read_text()
    assert "What each series can detect" in html and "detects &gt;= 29.1%" in html
    assert "1 series can detect a 25% change, 1 cannot (noise), 1 have too few runs" in html
