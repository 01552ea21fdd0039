"""Every ok row says where its energy came from (issue 39, "Done when"): a row that was checked but never timed (the
Triton interpreter on a CPU) has no window to measure over, and says so, rather than carrying no energy at all."""

from __future__ import annotations

from xmfu.harness.engine import run_telemetry


def test_a_row_checked_but_not_timed_says_not_measured_with_why():
    row = {"platform": "cpu", "timing_note": "Triton interpreter on a CPU: the result is checked, its time says "
                                             "nothing about hardware"}
    e = run_telemetry.energy(None, None, [], 10.0, None, row, None)
    assert e["source"] == "not measured" and e["scope"] == "cpu package" and e["tdp_w"] is None
    assert e["reason"] == ("no timed calls: Triton interpreter on a CPU: the result is checked, its time says "
                           "nothing about hardware")
    assert run_telemetry.energy(None, None, [], 10.0, None, {"platform": "cuda"}, 700.0)["reason"] == (
        "no timed calls: the row was not timed")
