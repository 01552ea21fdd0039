"""A row whose FLOPs run in several formats, re-derived (schema/formats.py): its FLOPs per format sum to its
`flops`, each format's peak is the peak table's for the recorded device (the row's own dtype: the row's
peak_tflops, which row_checks.peak_problems checks), and both MFU figures and their denominators follow from those
with the one definition the engine wrote them with (schema/formats.derive)."""

from __future__ import annotations

from typing import Any

from xmfu.harness.machine.peaks import lookup
from xmfu.harness.results.rederive.row_checks import memoized, recorded_device
from xmfu.harness.results.rederive.times import Settings, close, is_number, same
from xmfu.harness.results.schema import formats

_NUMBERS = ("weighted_peak_tflops", "mfu_weighted", "mfu_bf16")
_WORDS = ("mfu_weighted_denominator", "mfu_bf16_denominator")


def _peaks(row: dict[str, Any], stated: dict[str, Any], devices: list[dict[str, Any]], s: Settings,
           memo: dict[Any, Any] | None) -> tuple[dict[str, float | None], dict[str, str]] | None:
    """Each format's peak and note as the run looked them up; None where the recorded device is unknown."""
    index = row.get("device_index", 0)
    device = memoized(memo, ("device", type(index), index), lambda: recorded_device(row, devices))
    if device is None:
        return None
    peaks: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for fmt in stated:
        if fmt == row.get("dtype"):
            peaks[fmt], notes[fmt] = row.get("peak_tflops"), row.get("peak_note") or ""
        else:
            peak = memoized(memo, ("peak", type(index), index, fmt),
                            lambda fmt=fmt: lookup(device, fmt, cpu_clock_ghz=s.cpu_clock_ghz))
            peaks[fmt], notes[fmt] = peak.tflops, peak.note
    return peaks, notes


def format_problems(row: dict[str, Any], devices: list[dict[str, Any]], s: Settings, where: str,
                    memo: dict[Any, Any] | None = None) -> list[str]:
    split, stated = row.get("flops_by_format"), row.get("mfu_formats")
    if split is None and stated is None:
        return []
    if not isinstance(split, dict) or not isinstance(stated, dict) or not isinstance(stated.get("peak_tflops"), dict):
        return [f"{where}: flops_by_format and mfu_formats are stated together or not at all"]
    out = []
    if is_number(row.get("flops")) and not close(sum(split.values()), row["flops"]):
        out.append(f"{where}: flops_by_format sums to {sum(split.values())}, not the row's flops {row['flops']}")
    looked_up = _peaks(row, stated["peak_tflops"], devices, s, memo)
    if looked_up is None:
        return out
    peaks, notes = looked_up
    for fmt, want in peaks.items():
        if not same(stated["peak_tflops"].get(fmt), want):
            out.append(f"{where}: mfu_formats.peak_tflops.{fmt} {stated['peak_tflops'].get(fmt)} is not the peak "
                       f"table's ({want})")
    invalid = row.get("timing_note") or "not valid" if row.get("timing_valid") is False else None
    tflops = row.get("tflops") if row.get("status") == "ok" else None
    want = formats.derive(tflops, split, peaks, notes, invalid)
    for key in _NUMBERS + _WORDS:
        if not same(stated.get(key), want[key]):
            out.append(f"{where}: mfu_formats.{key} {stated.get(key)!r} is not what the row's tflops, "
                       f"flops_by_format and peaks give ({want[key]!r})")
    return out
