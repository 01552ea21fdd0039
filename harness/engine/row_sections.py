"""One row of cases.jsonl, assembled from the sections the bundle's Row record declares (results/schema/row.py),
each by its own function, in the order its inputs exist: what was run where (the case and the attempt), the
conditions it ran under, its time (the samples, summarized), its rank spread, and the samples record beside it. The
figures that follow from the time (rates, utilization, the workload's own figures, telemetry) are the runner's, which
holds the peak, the achievable figure and the readings.

A failure anywhere here is xmfu's own: `unfit` turns a row the format refuses into a failed row that says so.
"""

from __future__ import annotations

import resource
from typing import Any

import numpy as np

from xmfu.harness.engine.attempts import Attempt
from xmfu.harness.engine.case import Case
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.sampler import ci_target_met, stop_reason
from xmfu.harness.engine.settings import RunConfig
from xmfu.harness.engine.timing import Series
from xmfu.harness.machine import stack
from xmfu.harness.machine.sync import sync_rule
from xmfu.harness.machine.threads import threads_record
from xmfu.harness.results.bundle.writer import RecordError, utc_now
from xmfu.harness.results.rederive.warmup import warmup_disturbance
from xmfu.harness.results.statistics.summary import Summary, spread, summarize


def identity(run_id: str, phase: str, case: Case, a: Attempt, ctx: RunContext) -> dict[str, Any]:
    """What was run, where, and how it ended: the fields every row has first."""
    device = ctx.device
    return {"run_id": run_id, "phase": phase, "case_id": case.case_id, "workload": case.workload,
            "backend": a.backend, "platform": ctx.platform.kind, "device": device.name,
            "device_index": device.index, "device_uuid": device.uuid, "device_pci_bus_id": device.pci_bus_id,
            "dtype": case.dtype, "params": case.params(), "status": a.status, "reason": a.reason,
            "flops": case.flops(), "flop_convention": case.flop_convention, "bytes": case.bytes_moved()}


def conditions(a: Attempt, ctx: RunContext, started: str, clocks: dict[str, Any],
               contention: dict[str, Any] | None) -> dict[str, Any]:
    """How the row was checked and under what it ran: sync rule, correctness, the backend's notes, the times, the
    stack, clocks, contention and threads. `time_s` is null until the timing section says otherwise."""
    p = a.prepared
    timed_check = {"timed_check": a.timed_check} if a.timed_check is not None else {}
    return {"time_s": None, "timing_valid": bool(p and p.timing_valid), "timing_note": p.timing_note if p else "",
            "sync": sync_field(a, ctx), "correctness": a.check, **timed_check, "notes": p.notes if p else {},
            "started": started, "finished": utc_now(),
            "stack": stack.torch_settings(ctx.platform.kind) if p and p.framework == "torch" else None,
            "versions": stack.loaded_versions(),
            "clocks_locked": clocks.get("locked"), "clocks": clocks, "contention": contention,
            "threads": threads_record(p.framework) if p and ctx.platform.kind == "cpu" else None}


def provenance(plugin: dict[str, Any] | None, cfg: RunConfig, phase: str) -> dict[str, Any]:
    """A plug-in's origin, and a smoke run's word that it is not the figure of the sizes named."""
    out: dict[str, Any] = {}
    if plugin:
        out["plugin"] = plugin
    if cfg.scale == "smoke":
        out["scale"] = "smoke"
        out["scale_note"] = "; ".join(cfg.scale_notes.get(phase, ())) or "run at its smoke sizes"
    return out


def summary_of(a: Attempt, cfg: RunConfig) -> Summary | None:
    """The time statistics of an ok attempt's samples; None where it has none."""
    s = a.series
    if a.status == "ok" and s and s.samples:
        return summarize(s.samples, cfg.timing.bootstrap_resamples, s.sample_repeats)
    return None


def timing(a: Attempt, summary: Summary | None, cfg: RunConfig, timed_out: bool, method: dict[str, Any],
           timing_valid: bool, note: str) -> dict[str, Any]:
    """time_s and how it was taken (timer, stop rule, launch overhead, methods), the repeats and the variants; an
    ok row that was checked but not timed says so in its timer."""
    s = a.series
    if summary is not None and s is not None:
        out: dict[str, Any] = {
            "time_s": summary.as_dict(),
            "timer": {"name": s.timer.name, "inner": s.inner, "stop": stop_reason(s, cfg.timing, timed_out),
                      "ci_target_met": ci_target_met(s, cfg.timing, timed_out), "inner_note": s.inner_note,
                      **launch_fields(s, summary.median), **method, **fresh_fields(a)},
            "repeats": repeat_fields(s)}
        if a.variants:
            out["variants"] = variant_fields(a, cfg.timing.bootstrap_resamples)
        return out
    if a.status == "ok" and not timing_valid:
        return {"timer": {"name": None, "inner": None, "stop": f"checked, not timed: {note}"}}
    return {}


def fresh_fields(a: Attempt) -> dict[str, Any]:
    """timing.fresh_inputs: what writing new inputs before each call cost (outside the time) and how often."""
    if not a.fresh_costs:
        return {}
    return {"fresh_inputs_s": float(np.mean(a.fresh_costs)), "fresh_inputs_calls": len(a.fresh_costs)}


def rank_fields(a: Attempt) -> dict[str, Any]:
    """A multi-process row: every rank's median and the slowest's skew."""
    if not a.rank_samples or not all(a.rank_samples):
        return {}
    medians = [float(np.median(r)) for r in a.rank_samples]
    return {"ranks": len(medians), "rank_combine": a.prepared.rank_combine, "per_rank_median_s": medians,
            "rank_skew": max(medians) / float(np.median(medians))}


def variant_fields(a: Attempt, resamples: int) -> dict[str, Any]:
    """Each timed variant's statistics (combined over ranks like the step) and every rank's median of it."""
    out: dict[str, Any] = {}
    for name, s in a.variants.items():
        if s.error is not None or not s.samples:
            out[name] = {"time_s": None, "error": s.error or "no samples"}
            continue
        entry: dict[str, Any] = {"time_s": summarize(s.samples, resamples, s.sample_repeats).as_dict()}
        per_rank = a.variant_rank_samples.get(name)
        if per_rank and all(per_rank):
            entry["per_rank_median_s"] = [float(np.median(r)) for r in per_rank]
        out[name] = entry
    return out


def repeat_fields(s: Series) -> dict[str, Any] | None:
    """Each repeat's median and the spread between them (None for a single measurement)."""
    ids = sorted(set(s.sample_repeats))
    if len(ids) < 2:
        return None
    medians = [float(np.median([v for v, r in zip(s.samples, s.sample_repeats, strict=True) if r == i])) for i in ids]
    return {"medians_s": medians, "inner": s.inners, **spread(medians)}


def per_repeat(s: Series) -> list[list[float]]:
    """The raw samples of each repeat, in the order they were taken."""
    out: dict[int, list[float]] = {}
    for value, r in zip(s.samples, s.sample_repeats, strict=True):
        out.setdefault(r, []).append(value)
    return [out[r] for r in sorted(out)]


def launch_fields(s: Series, device_median: float) -> dict[str, Any]:
    """The host's time to issue one call against the measured time per call. When the host needs 90% or
    more of it, the device was (nearly) waiting for the host: the figure is launch overhead, not kernels."""
    if not s.host_samples:
        return {"host_launch_s": None, "launch_bound": None}
    host = float(np.median(s.host_samples))
    return {"host_launch_s": host, "launch_bound": bool(host >= 0.9 * device_median)}


def sync_field(a: Attempt, ctx: RunContext) -> dict[str, Any]:
    """How completion was established for this row's time: the timer's rule where it was timed (machine/sync.py),
    else why there was no time to establish."""
    if a.series is not None:
        return a.series.timer.sync.as_dict()
    p = a.prepared
    if p is None or not p.timing_valid:  # an unproven sync says so here: time_attempts set the note to its reason
        return {"method": None, "reason": f"not timed: {(p.timing_note if p else '') or a.status}"}
    rule = sync_rule(p.framework, ctx.platform.kind)
    return {"method": None, "reason": f"not timed: {a.status} (its sync would have been: {rule.method})"}


def extras(case: Case, a: Attempt, time_s: dict | None, peak: float | None, timing_valid: bool,
           platform_kind: str) -> dict[str, Any]:
    """Figures only some workloads have: work units per second, hardware FLOPs (HFU), peak device memory."""
    out: dict[str, Any] = {}
    median = time_s["median"] if time_s else None
    bandwidth = getattr(case, "bandwidth", None)
    if bandwidth and median and a.prepared:
        out.update(bandwidth(median, a.prepared.notes.get("ranks")))
    units = getattr(case, "work_units", None)
    if units and median:
        out["throughput"] = {f"{name}_per_s": count / median for name, count in units().items()}
    hardware = getattr(case, "hardware_flops", None)
    hw = hardware() if hardware else None
    if hw is not None:
        out["hardware_flops"] = hw
        out["hfu"] = hw / median / 1e12 / peak if median and peak and timing_valid else None
    if a.prepared and a.prepared.recorded and a.status == "ok":
        out.update(a.prepared.recorded())
    if a.prepared and a.prepared.peak_memory and a.status == "ok":
        out["peak_memory_bytes"] = a.prepared.peak_memory()
        out["peak_memory_source"] = a.prepared.peak_memory_source
        if out["peak_memory_bytes"] is None and platform_kind == "cpu":
            # A CPU's "device memory" is the process: its high-water mark (Linux reports KiB), all backends so far.
            out["peak_memory_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            out["peak_memory_source"] = "process max RSS so far (CPU)"
    return out


def closing(flops: float, check: dict[str, Any] | None) -> dict[str, Any]:
    """The last words: a bandwidth workload has no MFU, and a collective's wrong elements are nccl-tests' #wrong."""
    out: dict[str, Any] = {}
    if flops == 0:
        out["mfu_reason"] = "not a compute workload: see the bandwidth figures"
    if check and check["metric"].startswith("#wrong"):
        out["wrong"] = int(check["error"])
    return out


def samples_record(run_id: str, case: Case, a: Attempt) -> dict[str, Any]:
    """The row's line of samples.jsonl: every raw sample, its round and repeat, every rank's, every variant's."""
    s = a.series
    out = {"run_id": run_id, "case_id": case.case_id, "backend": a.backend, "unit": "s",
           "rank_samples": a.rank_samples, "inner": s.inner if s else None, "warmup": s.warmup_s if s else [],
           "samples": s.samples if s else [], "rounds": s.rounds if s else [],
           "repeats": s.sample_repeats if s else []}
    if s and s.intervals and len(s.intervals) == len(s.samples):  # the energy window (samples.jsonl intervals)
        out["intervals"] = [[a0, b0] for a0, b0 in s.intervals]
    if a.variants:
        out["variants"] = {name: {"samples": v.samples, "rank_samples": a.variant_rank_samples.get(name),
                                  "repeats": v.sample_repeats} for name, v in a.variants.items()}
    return out


def own_contention(row: dict[str, Any], samples: dict[str, Any]) -> dict[str, Any] | None:
    """The row's contention record: its case's, or, where the row's timed samples and its own warm-up calls
    disagree past the bounds validation holds a quiet row to (results/rederive/warmup.py), that record marked
    contended with why (`warmup`). A load can fall on the warm-up alone and leave the case's process and run-queue
    figures under their limits: the row is then no evidence in a verdict, and its bundle still validates."""
    case = row.get("contention")
    why = warmup_disturbance(row, samples)
    if why is None:
        return case
    reason = "; ".join(filter(None, [(case or {}).get("reason"), why]))
    return {**(case or {}), "contended": True, "reason": reason, "warmup": why}


def unfit(row: dict[str, Any], samples: dict[str, Any], exc: RecordError) -> tuple[dict[str, Any], dict[str, Any]]:
    """A row that the bundle format refuses, as a failed row that keeps what identifies it (and the raw samples,
    where they are plain numbers): the bundle stays valid and the defect is named in it."""
    keep = ("run_id", "phase", "case_id", "workload", "backend", "platform", "device", "device_index", "dtype",
            "params", "flops", "flop_convention", "bytes", "comparability_key", "comparability", "started", "finished")
    failed = {k: row[k] for k in keep if k in row}
    failed.update(status="failed", reason=f"xmfu error, please report it: {exc}", time_s=None, tflops=None,
                  peak_tflops=None, peak_source=None, mfu=None, mfu_vs_achievable=None, timing_valid=False)
    values = samples.get("samples") or []
    plain = all(type(v) is float for v in values)  # the samples themselves may be what the format refused
    return failed, {"case_id": failed.get("case_id", ""), "backend": failed.get("backend", ""),
                    "samples": values if plain else []}
