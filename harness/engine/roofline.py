"""The engine's use of the roofline (harness/machine/roofline.py): each row's `roofline` record at the roofs its own
peak figures come from, and the floor judged on every timed attempt before its row is written."""

from __future__ import annotations

from typing import Any

from xmfu.harness.engine.attempts import Attempt
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.peaks import Peak, lookup, lookup_membw
from xmfu.harness.machine.roofline import Roofs, Work, faster_than_roofline, median_of, place


def roofs_of(ctx: RunContext, peak: Peak) -> Roofs:
    """The roofs of a row whose compute roof is `peak` (the row's own peak figure): the device's memory bandwidth,
    looked up as the row's MBU figures are, and its last-level cache."""
    return Roofs(peak, lookup_membw(ctx.device, override=ctx.config.peak_membw_gbps), ctx.device.cache_bytes)


def compute_roof(ctx: RunContext, case: Any) -> Peak:
    """The peak a row of `case` states (runner._figures looks it up the same way); none without FLOPs."""
    cfg = ctx.config
    if case.flops() <= 0:
        return Peak(None, None, None, "not a compute workload: see the bandwidth figures")
    return lookup(ctx.device, case.dtype, override=cfg.peak_tflops, cpu_clock_ghz=cfg.cpu_clock_ghz)


def record_for(ctx: RunContext, case: Any, peak: Peak, median: float | None) -> dict[str, Any]:
    """The `roofline` record of a row of `case` whose compute roof is `peak`; `median`: its time (None: not timed)."""
    return place(Work.of(case), roofs_of(ctx, peak), median)


def judge(attempts: list[Attempt], case: Any, ctx: RunContext) -> None:
    """Fail every timed attempt whose median is under its floor, with the INVALID reason: its time is not shown
    (only an ok row is timed) and its samples stay in samples.jsonl, where `xmfu validate` finds the same median."""
    for a in attempts:
        p, s = a.prepared, a.series
        if a.status != "ok" or p is None or not p.timing_valid or s is None or not s.samples:
            continue
        c = p.case or case
        record = record_for(ctx, c, compute_roof(ctx, c), None)
        why = faster_than_roofline(record, median_of(s.samples, s.sample_repeats))
        if why:
            a.status, a.reason = "failed", why
