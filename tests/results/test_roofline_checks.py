"""`xmfu validate` re-derives every row's `roofline` record and its floor's verdict (rederive/row_checks.py
roofline_problems): a share, a roof or a verdict edited alone is refused, with the field named."""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import gpu_device
from xmfu.harness.machine.peaks import lookup, lookup_membw
from xmfu.harness.machine.roofline import Roofs, Work, faster_than_roofline, place
from xmfu.harness.results.rederive.roofline import ROOFLINE_WORK, roofline_problems, roofline_work_problems
from xmfu.harness.results.rederive.times import Restated

H100 = gpu_device("NVIDIA H100 80GB HBM3", 132, cache_bytes=50 * 2**20, index=0)
DEVICES = [dataclasses.asdict(H100)]
FLOPS, BYTES = 2.0 * 4096**3, 3.0 * 4096**2 * 2


def _row(median: float = 2e-4, **changes) -> dict:
    roofs = Roofs(lookup(H100, "bf16"), lookup_membw(H100), H100.cache_bytes)
    row = {"flops": FLOPS, "bytes": BYTES, "peak_tflops": roofs.peak.tflops, "status": "ok", "timing_valid": True,
           "peak_entry": roofs.peak.entry, "time_s": {"median": median}, "device_index": 0, "reason": None,
           "roofline": place(Work(FLOPS, BYTES), roofs, median)}
    row.update(changes)
    return row


def _problems(row: dict, samples: list[float] | None = None) -> list[str]:
    rec = {"samples": samples or [], "repeats": [0] * len(samples or [])}
    return roofline_problems(row, rec, DEVICES, None, "cases.jsonl line 1")


def test_a_genuine_record_passes():
    assert _problems(_row()) == []


@pytest.mark.parametrize("field, value, needle", [
    ("sol_fraction", 0.99, "roofline.sol_fraction"),
    ("bound", "memory", "roofline.bound"),
    ("peak_membw_gbps", 8000.0, "not the recorded device's"),
    ("floor_s", 1e-9, "roofline.floor_s"),
    ("membw_entry", "override", "not the recorded device's"),  # an override roof sets no floor
    ("floor_flops", 2 * FLOPS, "roofline.floor_flops"),
    ("floor_flops", 1.0, "roofline.floor_s"),  # the floor then reads the FLOPs it says
])
def test_a_figure_edited_alone_is_refused(field, value, needle):
    row = _row()
    row["roofline"][field] = value
    assert any(needle in p for p in _problems(row)), _problems(row)


def test_an_ok_row_timed_under_the_floor_is_a_forgery_even_when_every_figure_agrees():
    fast = _row(median=1e-7)  # 100x under the 1.39e-4 s compute time: the record is consistent, the time is not
    assert any("under the roofline's floor" in p for p in _problems(fast))


def test_a_row_failed_as_faster_than_the_roofline_must_have_the_samples_that_say_so():
    row = _row(status="failed", time_s=None)
    row["roofline"] = place(Work(FLOPS, BYTES), Roofs(lookup(H100, "bf16"), lookup_membw(H100), H100.cache_bytes),
                            None)
    row["reason"] = faster_than_roofline(row["roofline"], 1e-7)
    assert _problems(row, [1e-7] * 5) == []
    assert any("is not under the floor" in p for p in _problems(row, [1e-3] * 5))


def test_the_workloads_floor_flops_and_off_roofline_are_checked_against_their_formulas():
    """`off_roofline` written into a matmul row would lift its floor: the formulas (restated) say it has none."""
    row = _row()
    row["roofline"]["off_roofline"] = "forged"
    restated = Restated(figures={ROOFLINE_WORK: {"floor_flops": None, "off_roofline": None}})
    want = restated.figures[ROOFLINE_WORK]
    assert any("roofline.off_roofline 'forged'" in p for p in roofline_work_problems(row, want, "line 1"))
    assert roofline_work_problems(_row(), want, "line 1") == []
