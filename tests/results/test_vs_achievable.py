"""A fraction of the achievable figure is like for like or says it is not (issue 42 item 2): on a CPU the main phase
of `experiment=mamf` (warm calls) read 297.6% "vs achievable" against its flushed sweep, printed as a plain
percentage. Now the row states why (`mfu_vs_achievable_reason`), the flags show it, the end table marks the figure
and `xmfu validate` re-derives the reason."""

from __future__ import annotations

import pytest

from tests.results.rows import TIMER, valid_row
from xmfu.harness.engine.metrics import utilization
from xmfu.harness.machine.peaks import Peak
from xmfu.harness.results.analysis import flags
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.rederive.row_checks import derived_problems
from xmfu.harness.results.render.table import _note, _vs_achievable, table
from xmfu.harness.results.schema import achievable

PEAK = Peak(0.3323, "cores x clock x FLOPs/cycle/core", "cpu-estimate", "2 cores (scripted)")
FLUSHED = {"tflops": 0.0206, "source": "mamf sweep in this run", "method": "flushed"}


def _row(ratio: float, timed: str, method: str | None) -> dict:
    """A main-phase row divided by an achievable figure measured by `method`, its calls timed `timed`."""
    row = valid_row(peak=None)
    flushed = {"flush_l2_bytes": 33554432} if timed == "flushed" else {}
    reason = achievable.reason(ratio, timed, method)
    return {**row, "timer": {**TIMER, **flushed}, "achievable_tflops": row["tflops"] / ratio,
            "achievable_method": method, "mfu_vs_achievable": ratio, "mfu_vs_achievable_reason": reason}


@pytest.mark.parametrize(("timed", "method", "ratio", "said"), [
    ("flushed", "flushed", 0.88, None),
    ("warm", "warm", 0.88, None),
    ("warm", "flushed", 0.88, ["method unmatched"]),
    ("flushed", "warm", 0.5, ["method unmatched"]),
    ("warm", "not stated", 0.88, ["method unmatched"]),
    ("flushed", "flushed", 1.04, ["above achievable"]),
    ("warm", "flushed", 2.976, ["method unmatched", "above achievable"]),
])
def test_the_engine_states_why_a_fraction_of_achievable_is_not_like_for_like(timed, method, ratio, said):
    """Before: every row got the bare ratio, whatever method either side was timed by."""
    tflops = FLUSHED["tflops"] * ratio
    out = utilization(tflops, PEAK, None, {**FLUSHED, "method": method}, timed)
    assert out["mfu_vs_achievable"] == pytest.approx(ratio)
    reason = out["mfu_vs_achievable_reason"]
    assert (reason is None) == (said is None)
    if said:
        assert [part.split(":")[0] for part in reason.split("; ")] == said
    row = typed(_row(ratio, timed, method))
    assert [f for f in flags.row_flags(row) if f in flags.ACHIEVABLE_FLAGS] == (said or [])


def test_warm_against_flushed_is_marked_in_the_end_table_never_a_plain_percentage():
    row = typed(_row(2.976, "warm", "flushed"))
    assert _vs_achievable(row) == "297.6%?"
    note = _note(row)
    assert "vs achievable: method unmatched: timed warm against an achievable figure measured flushed" in note
    assert "above achievable: above 100%" in note and "timing.flush_l2=true" in note
    printed = table([row])
    assert "297.6%?" in printed and "method unmatched,above achievable" in printed.replace(",\n", ",")
    like = typed(_row(0.88, "flushed", "flushed"))
    assert (_vs_achievable(like), _note(like)) == ("88.0%", "")


def test_a_bundle_written_before_the_reason_is_still_flagged_from_its_figures():
    old = {k: v for k, v in _row(2.976, "warm", "flushed").items() if k != "mfu_vs_achievable_reason"}
    assert _vs_achievable(typed(old)) == "297.6%?"
    assert derived_problems(old, "cases.jsonl line 1") == []  # nothing to re-derive: the field is not there


def test_validate_names_a_caveat_edited_away_or_stated_falsely():
    row = _row(2.976, "warm", "flushed")
    assert derived_problems(row, "cases.jsonl line 1") == []
    hidden = {**row, "mfu_vs_achievable_reason": None}
    problems = derived_problems(hidden, "cases.jsonl line 1")
    assert len(problems) == 1 and "mfu_vs_achievable_reason None but the row's figures" in problems[0], problems
    assert "timed warm" in problems[0] and "method unmatched" in problems[0]
    like = _row(0.88, "flushed", "flushed")
    assert derived_problems({**like, "mfu_vs_achievable_reason": "above achievable: made up"}, "l") != []
