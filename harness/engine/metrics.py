"""From a time summary to throughput, MFU and bandwidth, each with its denominator attached."""

from __future__ import annotations

from typing import Any

from xmfu.harness.machine.peaks import Peak, lookup
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.results.schema import achievable as achievable_caveats
from xmfu.harness.results.schema import formats
from xmfu.harness.results.statistics.summary import Summary


def throughput(flops: float, bytes_moved: float, t: Summary) -> dict[str, Any]:
    """TFLOP/s (1e12 FLOP/s) and GB/s (1e9 B/s) at the median time, with the CI mapped through 1/t."""
    return {
        "tflops": flops / t.median / 1e12,
        "tflops_ci95": [flops / t.ci95_high / 1e12, flops / t.ci95_low / 1e12],
        "bandwidth_gbps": bytes_moved / t.median / 1e9 if bytes_moved else None,
    }


def utilization(tflops: float | None, peak: Peak, invalid_timing: str | None,
                achievable: dict[str, Any] | None, timed_method: str | None = None) -> dict[str, Any]:
    """MFU against the datasheet peak, and against the achievable (best measured matmul) peak.

    MFU = achieved FLOP/s / peak FLOP/s of the device used; null, with the reason, when either side of the
    division cannot be trusted. `invalid_timing` is the reason a time does not represent the hardware.
    `timed_method` (flushed or warm) is how this row's calls were timed: a ratio against an achievable figure
    measured otherwise, or above 1, says so in `mfu_vs_achievable_reason` (issue 42 item 2).
    """
    out: dict[str, Any] = {**peak.as_row(), "mfu": None, "mfu_reason": None, "mfu_vs_achievable": None,
                           "mfu_vs_achievable_reason": None,
                           "achievable_tflops": achievable["tflops"] if achievable else None}
    if invalid_timing is not None:
        out["mfu_reason"] = f"timing not valid: {invalid_timing}"
    elif tflops is None:
        out["mfu_reason"] = "no valid time"
    elif peak.tflops is None:
        out["mfu_reason"] = peak.note
    else:
        out["mfu"] = tflops / peak.tflops
        if out["mfu"] > 1:
            out["mfu_reason"] = ("above 1: the peak is an underestimate (e.g. a CPU clock below the real "
                                 "boost clock) or the FLOP count is too high; check peak_note")
    if tflops is not None and invalid_timing is None and achievable:
        out["mfu_vs_achievable"] = ratio = tflops / achievable["tflops"]
        out["mfu_vs_achievable_reason"] = achievable_caveats.reason(ratio, timed_method, achievable.get("method"))
    return out


def format_utilization(case: Any, tflops: float | None, device: DeviceInfo, row_peak: Peak,
                       invalid_timing: str | None, cpu_clock_ghz: float | None) -> dict[str, Any]:
    """A case whose FLOPs run in several formats (the optional case method `flops_by_format()`, e.g. an fp8
    training step): its FLOPs per format and MFU against the FLOP-weighted peak of those formats and against the
    bf16 peak, both labelled (schema/formats.py); {} for every other case. The row's own dtype takes the row's peak
    (an override included); every other format the peak table's."""
    split_of = getattr(case, "flops_by_format", None)
    split = split_of() if split_of is not None else None
    if not split:
        return {}
    peaks: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for fmt in dict.fromkeys([*split, "bf16"]):
        peak = row_peak if fmt == case.dtype else lookup(device, fmt, cpu_clock_ghz=cpu_clock_ghz)
        peaks[fmt], notes[fmt] = peak.tflops, peak.note
    return {"flops_by_format": split,
            "mfu_formats": formats.derive(tflops, split, peaks, notes, invalid_timing)}
