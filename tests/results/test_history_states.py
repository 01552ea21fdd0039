"""States a CI can act on (issue 38, item 3): each series' state, the night's, and `history check --exit-on`."""

from __future__ import annotations

import pytest
from msgspec.structs import asdict, replace

from xmfu.harness.results.history import judge, parquet, states
from xmfu.harness.results.history.stored import Stored

pytest.importorskip("pyarrow", exc_type=ImportError)

STEADY = [700, 701, 699, 700, 702, 698, 700]
# case -> (tflops per night, what the latest night's row is instead of plain ok, the state expected)
NIGHTS = {
    "reg": ([*STEADY, 600], {}, states.REGRESSION),
    "better": ([*STEADY, 800], {}, states.NO_REGRESSION),
    "same": ([*STEADY, 701], {}, states.NO_REGRESSION),
    "noisy": ([700, 400, 700, 380, 690, 410, 700, 390], {}, states.NOT_JUDGED),  # within the runs' own spread
    "cont": ([*STEADY, 701], {"contended": True, "contention": "load 3 on 2 cores"}, states.NOT_JUDGED),
    "skip": ([*STEADY, None], {"status": "skipped"}, states.NOT_JUDGED),
    "broke": ([*STEADY, None], {"status": "failed"}, states.FAILURE),
    "young": ([None, None, None, None, None, 700, 700, 700], {}, states.INSUFFICIENT),
}


def _night(i: int, case_id: str, tflops: float | None, **fields) -> Stored:
    """Night i's row of one matmul case; every case of a night is one run (n<i>), as a suite's matmul part."""
    row = {"status": "ok" if tflops is not None else "failed", "contended": False, **fields}
    return Stored(run_id=f"n{i}", created=parquet.when(f"2026-11-{i + 1:02d}T00:00:00Z"), workload="matmul",
                  case_id=case_id, backend="torch", device="GPU A", platform="cuda", dtype="bf16",
                  timing_valid=tflops is not None, comparability_key="k", tflops=tflops, median_s=1.0,
                  ci95_low_s=0.99, ci95_high_s=1.01, cv=0.01, **row)


def _rows(nights=NIGHTS) -> list[Stored]:
    out = []
    for case_id, (values, latest, _) in nights.items():
        for i, v in enumerate(values):
            if v is not None or i == len(values) - 1:
                out.append(_night(i, case_id, v, **(latest if i == len(values) - 1 else {})))
    return out


def _states(rows, strict=False):
    found = states.states(rows, "tflops", judge.check(rows, "tflops"), strict)
    return {s.key[1]: s for s in found}


def test_each_series_is_in_the_state_its_runs_put_it_in():
    found = _states(_rows())
    assert {case: s.state for case, s in found.items()} == {case: n[2] for case, n in NIGHTS.items()}
    assert found["broke"].why == "failed in run n7" and found["skip"].why == "skipped in run n7"
    assert found["reg"].why.startswith("-14.3% against the baseline 700")
    assert found["better"].why == "improved +14.3%" and found["same"].why == ""
    assert "unreliable: noisy: run-to-run sd" in found["noisy"].why
    assert found["cont"].why == "latest run contended: load 3 on 2 cores"
    assert found["young"].why == "3 of 6 runs"
    assert _states(_rows(), strict=True)["noisy"].state == states.REGRESSION  # --strict judges the discounted


def test_an_old_failure_of_a_case_the_latest_run_no_longer_has_is_not_tonights():
    rows = [*_rows({"same": NIGHTS["same"]}), _night(3, "dropped", None)]  # failed on night 3, never run again
    rows += [_night(i, "dropped", 700.0) for i in range(3)]
    assert _states(rows)["dropped"].state == states.INSUFFICIENT


@pytest.mark.parametrize(("cases", "exit_on", "night", "status"), [
    (list(NIGHTS), states.EXIT_ON, states.FAILURE, 4),
    (list(NIGHTS), (states.REGRESSION,), states.FAILURE, 1),  # the worst state named that a series is in
    (["same", "cont", "young"], states.EXIT_ON, states.NOT_JUDGED, 0),  # a contended night is not red by default
    (["same", "cont", "young"], (states.NOT_JUDGED, states.INSUFFICIENT), states.NOT_JUDGED, 3),
    (["same", "young"], (states.NOT_JUDGED, states.INSUFFICIENT), states.INSUFFICIENT, 5),
    (["same", "better"], list(states.STATES[:-1]), states.NO_REGRESSION, 0),  # an improvement fails nothing
    ([], states.EXIT_ON, states.INSUFFICIENT, 0),
])
def test_the_night_and_the_exit_status(cases, exit_on, night, status):
    found = list(_states(_rows({c: NIGHTS[c] for c in cases})).values())
    assert states.night(found) == night and states.exit_status(found, exit_on) == status


def test_exit_on_names_what_is_allowed():
    assert states.parse_exit_on("regression, not_judged") == ("regression", "not_judged")
    assert states.parse_exit_on("none") == ()
    for bad in ("regresion", "no_regression", ","):
        with pytest.raises(ValueError, match="Allowed: a comma-separated list of failure, regression"):
            states.parse_exit_on(bad)


def _store(tmp_path, cases):
    import pyarrow as pa
    import pyarrow.parquet as pq

    store = tmp_path / "store"
    store.mkdir(parents=True)
    rows = _rows({c: NIGHTS[c] for c in cases})
    for run_id in {r.run_id for r in rows}:
        mine = [asdict(r) for r in rows if r.run_id == run_id]
        pq.write_table(pa.Table.from_pylist(mine, schema=parquet.schema()), store / f"{run_id}.parquet")
    return store


def test_check_prints_the_states_and_exits_on_the_ones_chosen(tmp_path, cli):
    store = str(_store(tmp_path, list(NIGHTS)))
    check = cli("history", "check", "--store", store, "--metric", "tflops")
    assert check.returncode == 4
    assert "FAILURE matmul broke torch GPU A bf16: failed in run n7" in check.stdout
    assert "NOT JUDGED matmul skip torch GPU A bf16: skipped in run n7" in check.stdout
    assert ("night: failure (1 failure, 1 regression, 3 not_judged, 1 insufficient_data, 2 no_regression); exit 4 "
            "(--exit-on regression,failure)") in check.stdout
    assert cli("history", "check", "--store", store, "--exit-on", "regression").returncode == 1
    assert cli("history", "check", "--store", store, "--exit-on", "none").returncode == 0
    bad = cli("history", "check", "--store", store, "--exit-on", "red")
    assert bad.returncode == 2 and "--exit-on red is not a state" in bad.stderr and bad.stderr.count("\n") == 1
    contended = str(_store(tmp_path / "b", ["same", "cont", "better"]))
    quiet = cli("history", "check", "--store", contended, "--metric", "tflops")
    assert quiet.returncode == 0 and "night: not_judged (1 not_judged, 2 no_regression); exit 0" in quiet.stdout
    assert "CHANGED matmul better" in quiet.stdout  # printed as before; an improvement no longer exits 1


def test_a_contended_row_the_rule_passes_is_not_judged():
    rows = _rows({"same": NIGHTS["same"]})
    rows[-1] = replace(rows[-1], contended=True, contention="")
    assert _states(rows)["same"].why == "latest run contended: contended"
