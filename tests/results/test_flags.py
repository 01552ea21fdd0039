"""A row's quality flags named in one place (harness/results/analysis/flags.py), from the row record's own fields."""

from __future__ import annotations

from tests.results.rows import untimed_row, valid_row
from xmfu.harness.results.analysis import flags


def test_a_clean_row_has_no_flags():
    assert flags.row_flags(valid_row(peak=100.0)) == [] and flags.flags_text(valid_row(peak=100.0)) == ""


def test_every_flag_is_read_from_the_row_record_in_one_order():
    row = valid_row(contention={"contended": True, "reason": "pid 7 (yes) used 95% of a core"},
                    timing_valid=False, timing_note="Triton interpreter",
                    timer={"ci_target_met": False, "stop": "max_samples=10 reached", "launch_bound": True,
                           "host_launch_s": 2e-5},
                    steady_state={"reached": False}, mfu=1.3, mfu_reason="above 1: peak too low",
                    non_finite_fields=["tflops"], scaling_efficiency=16.7, scaling_credible=False,
                    scaling_note="above 1: not credible", mfu_vs_achievable=2.976, achievable_method="flushed")
    assert flags.row_flags(row) == list(flags.ORDER)
    why = {f.name: f.why for f in flags.flags_of(row)}
    assert why["contended"] == "pid 7 (yes) used 95% of a core" and why["CI missed"] == "max_samples=10 reached"
    assert why["timing not valid"] == "Triton interpreter" and "20 us per call" in why["launch-bound"]
    assert why["scaling above 1"] == "above 1: not credible"
    assert why["method unmatched"].startswith("timed warm against an achievable figure measured flushed")
    assert flags.unjudged(row) == ["contended"]  # timing not valid is by design (the interpreter): a caveat
    assert flags.flags_text(row).startswith("contended, timing not valid, CI missed, launch-bound")


def test_an_untimed_row_is_not_flagged_for_its_timing_and_a_tally_counts_in_order():
    skipped = untimed_row(timing_valid=False)
    assert flags.row_flags(skipped) == []  # its status and reason say why it has no figure
    met = valid_row(peak=100.0, timer={"ci_target_met": True, "launch_bound": False})
    rows = [valid_row(peak=100.0, timer={"ci_target_met": False}),
            valid_row(peak=100.0, contention={"contended": True}), met, skipped,
            valid_row(peak=100.0, contention={"contended": False}, timer={"ci_target_met": None})]
    assert flags.tally(rows) == {"contended": 1, "CI missed": 1}
    assert list(flags.tally(rows)) == ["contended", "CI missed"]


def test_the_judgement_of_rows_problems_and_discounted_changes():
    """harness/suites/judgement.py: FAIL on a problem, NOT JUDGED on contended rows (or none validly timed), PASS
    otherwise, with the caveats named (issue 30, item 7): a row checked but never timed by design is a caveat."""
    from xmfu.harness.results.bundle.reader import typed
    from xmfu.harness.suites.judgement import judge

    clean, busy = typed(valid_row(peak=100.0)), typed(valid_row(peak=100.0, contention={"contended": True,
                                                                                          "reason": "load"}))
    interpreted = typed(valid_row(peak=100.0, case_id="c2", timing_valid=False, timing_note="Triton interpreter"))
    assert judge([clean]).line() == "PASS"
    assert judge([clean], unreliable=["unreliable: noisy x"]).line() == \
        "PASS: caveat: 1 changes for the worse discounted as unreliable (listed as NOTE)"
    assert judge([clean, busy, interpreted]).line() == (
        "NOT JUDGED: 1 of 3 rows contended (first: c1 torch: load); caveat: timing not valid 1 of 3 rows")
    assert judge([clean, interpreted]).line() == "PASS: caveat: timing not valid 1 of 2 rows"
    assert judge([interpreted]).line() == \
        "NOT JUDGED: no row has a valid timed figure (1 rows); caveat: timing not valid 1 of 1 rows"
    assert judge([typed(untimed_row())]).line() == "NOT JUDGED: no row has a valid timed figure (1 rows)"
    failed = judge([busy], problems=["a", "b", "c", "d"])
    assert failed.verdict == "FAIL" and failed.line() == "FAIL: a; b; c; and 2 more"
    assert failed.reasons[-1].startswith("1 of 1 rows contended")
