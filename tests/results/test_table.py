"""The table printed at the end of a run."""

from __future__ import annotations

from xmfu.harness.results.table import table


def _row(**kw):
    row = {"phase": "main", "workload": "matmul", "backend": "torch", "dtype": "bf16", "case_id": "matmul-bf16-64",
           "status": "ok", "timing_valid": True, "tflops": 1.0, "peak_tflops": 2.0, "mfu": 0.5,
           "time_s": {"median": 1e-3, "ci95_low": 0.5e-3, "ci95_high": 17e-3}}
    row.update(kw)
    return row


def test_a_row_that_missed_its_ci_target_is_flagged():
    missed = _row(timer={"ci_target_met": False, "stop": "time budget max_time_s=10 reached before the CI target"})
    out = table([missed]).splitlines()[-1]
    assert "ok, CI missed" in out and "825.0%!" in out and "CI target missed: time budget" in out
    fine = table([_row(timer={"ci_target_met": True, "stop": "95% CI"})]).splitlines()[-1]
    assert "CI missed" not in fine and "!" not in fine
