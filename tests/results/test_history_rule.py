"""The baseline rule as data (issue 38, item 5): declared once (judge.Rule), recorded with each judgement (the store's
_judgements/, suite.json, `history check --format json`), and a judgement under another rule named as such."""

from __future__ import annotations

import dataclasses
import json

import pytest

from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.history import judge, parquet, recorded, states
from xmfu.harness.suites import nightly

pytest.importorskip("pyarrow", exc_type=ImportError)


def test_the_rule_is_one_record_whose_fields_the_commands_take_their_defaults_from():
    from xmfu.harness.results.history import power

    rule = judge.RULE
    assert dataclasses.asdict(rule) == {"window": 7, "baseline": "median", "consecutive": 1, "sigmas": 3.0,
                                        "min_change": 0.02, "prediction_tail": judge.PREDICTION_TAIL,
                                        "min_baseline": judge.MIN_BASELINE, "detect": 0.10}
    assert rule.detect == power.DETECT and rule.min_baseline + 1 == judge.MIN_RUNS
    assert rule.text() == ("the median of the previous 7 runs; a change when the latest point lies beyond max(3 robust "
                           "sigmas, 2%) and, for the worse, outside the runs' 99.98% prediction interval; judged from "
                           "5 runs before the latest; every series should detect 10%")
    assert dataclasses.replace(rule, window=5, detect=0.2).differences(rule) == ["window 7 -> 5", "detect 0.1 -> 0.2"]


def _nights(tmp_path, store, count):
    from tests.suites.test_nightly import _night

    for night in range(count):
        suite = tmp_path / f"suite{night}"
        _night(suite / "host", night, 700.0 + night % 2)
        judged = nightly.append_and_check(store, suite, ["tflops"])
    return judged


def test_the_nightly_records_each_judgement_with_its_rule_in_the_store(tmp_path):
    pd = pytest.importorskip("pandas")
    store = tmp_path / "store"
    judged = _nights(tmp_path, store, 7)
    found, bad = recorded.load(store)
    assert bad == [] and [r.id for r in found] == [f"suite{n}" for n in range(7)]
    last = found[-1]
    assert last.rule == judge.RULE and last.run_ids == ["night6"] and last.nights == {"tflops": "no_regression"}
    assert {s["case_id"]: s["state"] for s in last.series} == {"matmul-bf16-8192x8192x8192-NN": "no_regression",
                                                                "att": "no_regression"}
    assert found[0].nights == {"tflops": "insufficient_data"}
    assert judged.record == last  # what suite.json keeps (suite.py: "history")
    assert json.loads(json.dumps(judged.record.as_dict()))["rule"]["window"] == 7
    assert len(pd.read_parquet(store)) == len(parquet.load(store))  # the records are not read as part of the table


def test_check_names_judgements_made_under_another_rule_and_files_that_are_no_record(tmp_path, cli):
    store = tmp_path / "store"
    _nights(tmp_path, store, 7)
    same = cli("history", "check", "--store", str(store), "--metric", "tflops")
    assert same.stdout.startswith(f"rule: {judge.RULE.text()}\n") and "NOTE" not in same.stdout
    other = cli("history", "check", "--store", str(store), "--metric", "tflops", "--window", "5")
    assert ("NOTE: 7 of the 7 judgements recorded in the store were made under another rule (latest: suite6, "
            in other.stdout)
    assert ": window 7 -> 5); their verdicts stand as recorded, this one is under the rule above" in other.stdout
    page = cli("history", "report", "--store", str(store), "-o", str(tmp_path / "h.html"), "--window", "5")
    html = (tmp_path / "h.html").read_text()
    assert page.returncode == 0 and "The rule: the median of the previous 5 runs;" in html
    assert "<p class='note'>7 of the 7 judgements recorded in the store were made under another rule" in html
    (store / recorded.FOLDER / "x.json").write_text("{not json")
    noted = cli("history", "check", "--store", str(store), "--metric", "tflops")
    assert f"NOTE: {store / recorded.FOLDER / 'x.json'} is not a judgement record; left out" in noted.stdout


def test_check_as_json_carries_the_rule_the_states_and_the_detectable_change(tmp_path, cli):
    store = tmp_path / "store"
    _nights(tmp_path, store, 7)
    out = cli("history", "check", "--store", str(store), "--metric", "tflops", "--format", "json", "--detect", "0.05")
    assert out.returncode == 0
    found = json.loads(out.stdout)
    assert found["rule"] == {**dataclasses.asdict(judge.RULE), "detect": 0.05}
    assert found["night"] == states.NO_REGRESSION and found["exit_status"] == 0
    assert found["exit_on"] == ["regression", "failure"] and ": detect 0.1 -> 0.05)" in found["notes"][0]
    assert found["summary"] == "2 series can detect a 5% change, 0 cannot (noise), 0 have too few runs"
    matmul = next(s for s in found["series"] if s["workload"] == "matmul")
    assert matmul["state"] == "no_regression" and matmul["can_detect"] is True
    assert matmul["detectable"] == max(matmul["rule_bound"], matmul["interval_bound"])


def test_a_store_holding_a_record_is_still_added_to(tmp_path):
    from tests.suites.test_nightly import _night

    store = tmp_path / "store"
    _nights(tmp_path, store, 1)
    assert parquet.add(store, read_bundle(_night(tmp_path / "more", 1, 700.0)), {})
    assert len({r.run_id for r in parquet.load(store)}) == 2
