"""The engine: for each case, prepare every backend, check it, time the correct ones together, write rows.

A failure in one (case, backend) becomes that row's status and reason; the sweep always goes on.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from xmfu.harness.engine import recheck, roofline, run_telemetry, stall
from xmfu.harness.engine import row_sections as sections
from xmfu.harness.engine.attempts import (
    Attempt,
    gather_ranks,
    lockstep,
    merge_repeats,
    prepare_and_check,
    release,
    time_attempts,
)
from xmfu.harness.engine.case import Case, Prepared, RunAborted
from xmfu.harness.engine.case_speedups import case_speedups
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.interrupts import raise_if_interrupted
from xmfu.harness.engine.metrics import format_utilization, throughput, utilization
from xmfu.harness.engine.registry import WorkloadDef
from xmfu.harness.engine.steady import steady_state
from xmfu.harness.engine.timers import flush_buffer
from xmfu.harness.machine import contention
from xmfu.harness.machine.frameworks import release_cached_memory
from xmfu.harness.machine.jax_distributed import jax_processes_joined
from xmfu.harness.machine.peaks import lookup_membw
from xmfu.harness.machine.sync import CUDA_EVENT, DEVICE_EVENT, READ_BACK, sync_rule
from xmfu.harness.machine.telemetry import Reading, Sampler, energy_check
from xmfu.harness.machine.telemetry.recorder import Recorder
from xmfu.harness.results.bundle.writer import BundleWriter, RecordError, utc_now
from xmfu.harness.results.schema.comparability import comparability_fields, comparability_key
from xmfu.harness.results.statistics.summary import Summary

StepListener = Callable[[str, str, str, str], None]  # (phase, case_id, backend, step): ("main", id, "jax", "checking")


@dataclass
class Phase:
    """A list of cases run against some backends; `name` tags its rows (e.g. "mamf", "main")."""

    name: str
    workload: WorkloadDef
    cases: Sequence[Case]
    backends: Sequence[str]


def _jax_spans_processes() -> bool:
    return jax_processes_joined() > 1


class CaseRunner:
    """Runs cases and appends their rows to a bundle; keeps the achievable peak found so far."""

    def __init__(self, ctx: RunContext, writer: BundleWriter, run_id: str,
                 progress: Callable[[dict[str, Any]], None], sampler: Sampler | None = None,
                 on_step: StepListener | None = None) -> None:
        self.ctx, self.writer, self.run_id, self.progress = ctx, writer, run_id, progress
        self.on_step = on_step  # hears (phase, case_id, backend, step) as each step of a case begins
        self.sampler = sampler
        self.clocks = run_telemetry.clocks(sampler)
        # the energy counter checked against power x time once, before any case (Zeus's start-up check)
        self.energy_check = energy_check.check(sampler) if sampler is not None else None
        self.own_pids = contention.own_processes(contention.snapshot())
        self.contention: dict[str, Any] | None = None
        self.case_count = 0
        self.first_reading: Reading | None = None  # the run's first and last telemetry readings (drift)
        self.last_reading: Reading | None = None
        self.readings: list[Reading] = []
        self.achievable: dict[str, Any] | None = None
        if ctx.config.achievable_tflops:
            self.achievable = {"tflops": ctx.config.achievable_tflops, "source": "config achievable_tflops",
                               "method": ctx.config.achievable_method}
        self.rows: list[dict[str, Any]] = []
        self._flush_fn: Callable[[], Any] | None = None
        self.flush_bytes: int | None = None
        # A multi-process JAX run (the front door sets these): a case whose calls stall for stall_limit_s (the
        # workload's timeout_s) has its rows failed and the run ended by `on_stall(reason)` (engine/stall.py).
        self.stall_limit_s: float | None = None
        self.on_stall: Callable[[str], None] | None = None

    def run_phase(self, phase: Phase) -> None:
        for case in phase.cases:
            self.run_case(phase, case)
            gc.collect()  # free this case's device buffers before the next allocates
            release_cached_memory()
            raise_if_interrupted()
        if phase.name == "mamf":
            self._set_achievable(phase)

    def run_case(self, phase: Phase, case: Case) -> None:
        """Measure the case `repeats` times (prepare, warm up, sample: the whole measurement, the backends'
        order rotating between repeats), then write one row per backend from all of its repeats."""
        started, repeats = utc_now(), self.ctx.config.repeats
        self.readings = []
        before = contention.snapshot(own=self.own_pids)
        self.case_count += 1
        per_repeat: list[list[Attempt]] = []
        timed_out = False
        limit = self.stall_limit_s if self.on_stall is not None else None
        try:
            with stall.watched(limit, lambda idle: self._stalled(phase, case, started, idle), _jax_spans_processes):
                for r in range(repeats):
                    attempts, out = self._measure(phase, case, r)
                    per_repeat.append(attempts)
                    timed_out = timed_out or out
        except RunAborted as exc:  # every backend of this case fails with the reason; the run then ends
            for b in phase.backends:
                self._emit(*self._row(phase, case, Attempt(b, "failed", f"run aborted: {exc}"), False, started))
            raise
        attempts = [merge_repeats([rep[i] for rep in per_repeat]) for i in range(len(phase.backends))]
        roofline.judge(attempts, case, self.ctx)  # a median under the roofline's floor fails its row
        self.contention = self._contention(before)
        self.writer.append_telemetry(case.case_id, [r.as_dict() for r in self.readings])
        built = [self._row(phase, case, a, timed_out, started) for a in attempts]
        speedups = case_speedups(attempts, [r for r, _ in built], self.ctx.config) if phase.name == "main" else {}
        for a, (row, samples) in zip(attempts, built, strict=True):
            row["speedup"] = speedups.get(a.backend)
            if a.status == "ok" and a.prepared and a.prepared.attachments:
                row["attachments"] = self._attach(row, a.prepared.attachments)
            if phase.workload.derive:
                row.update(phase.workload.derive(row, self.rows))
            self._emit(row, samples)

    def _stalled(self, phase: Phase, case: Case, started: str, idle: float) -> None:
        """From the watching thread (the main one is stuck in a collective): every backend of the case fails with
        the reason, as for RunAborted, and the front door ends the run."""
        reason = (f"jax.distributed: no call of this case completed for {idle:.0f} s (workload.timeout_s="
                  f"{self.stall_limit_s:g}): a process froze or died after joining")
        for b in phase.backends:
            self._emit(*self._row(phase, case, Attempt(b, "failed", f"run aborted: {reason}"), False, started))
        assert self.on_stall is not None
        self.on_stall(reason)

    def _attach(self, row: dict[str, Any], files: dict[str, bytes | str]) -> list[str]:
        """A backend's files (e.g. a profiler trace) into the bundle, named after the row they belong to. A name
        the bundle refuses (the writer's ValueError: a case id that holds `/`) costs that file, never the row: the
        row says which file was not kept and why (issue 26: a refused trace name once aborted the run)."""
        names = []
        for name, data in files.items():
            full = f"{row['case_id']}.{row['backend']}.{name}"
            try:
                self.writer.attach(full, data)
            except ValueError as exc:
                row["notes"] = dict(row.get("notes") or {})  # a copy: the backend's notes may be shared
                row["notes"].setdefault("attachments_refused", {})[full] = str(exc)
                continue
            names.append(full)
        return names

    def _measure(self, phase: Phase, case: Case, repeat: int) -> tuple[list[Attempt], bool]:
        """One repeat of the whole measurement, in the backends' order rotated by `repeat`; returns the
        attempts in the phase's order and whether the time budget ran out."""
        shift = repeat % len(phase.backends)
        order = list(phase.backends[shift:]) + list(phase.backends[:shift])
        by_backend = {b: prepare_and_check(case, self.ctx, phase.workload, b, self._listener(phase, case, b))
                      for b in order}
        ready = [by_backend[b] for b in order if by_backend[b].status == "ok"]
        timed = [a.backend for a in ready if a.prepared and a.prepared.timing_valid]
        if timed:
            self._listener(phase, case, ",".join(timed))("timing")
        recorder = self._recorder() if ready else None
        try:
            # JAX's timer never flushes: a JAX-only run allocates no (torch) flush buffer, so imports no torch
            flushed = self._flushes(phase) and any(a.prepared.framework != "jax" for a in ready)
            flush = self._flush() if flushed else None
            timed_out = time_attempts(ready, self.ctx, flush, repeat, case) if ready else False
        finally:
            new = recorder.stop() if recorder else []
            self.readings += new
            if new:
                self.first_reading = self.first_reading or new[0]
                self.last_reading = new[-1]
        gather_ranks(ready)
        for a in ready:  # each one's last timed output, checked again (engine/recheck.py)
            recheck.timed_output(a, case, self.ctx.config.timing.fresh_inputs)
        attempts = [by_backend[b] for b in phase.backends]
        if self.on_stall is not None and _jax_spans_processes():
            for a in attempts:
                if a.status == "failed" and lockstep(phase.workload, a.backend):
                    raise RunAborted(f"{a.backend} failed in a multi-process JAX run: {a.reason}")
        if self.ctx.config.repeats > 1:
            release(attempts)
            gc.collect()
            release_cached_memory()
        return attempts, timed_out

    def _listener(self, phase: Phase, case: Case, backend: str) -> Callable[[str], None]:
        """The step listener for one backend of one case: a display error never costs the measurement."""
        def heard(step: str) -> None:
            if self.on_step is None:
                return
            try:
                self.on_step(phase.name, case.case_id, backend, step)
            except Exception:  # the display is not the measurement: a row never fails for it
                self.on_step = None
        return heard

    def _contention(self, before: contention.Snapshot) -> dict[str, Any]:
        """Other processes on this host (and on the timed GPU) during the case just measured."""
        gpu = None
        if self.sampler is not None and self.sampler.available and hasattr(self.sampler, "processes"):
            try:
                gpu = self.sampler.processes()
            except Exception:  # a process list that cannot be read is unknown, not empty
                gpu = None
        on_gpu = self.ctx.platform.kind in ("cuda", "rocm")
        return contention.assess(before, contention.snapshot(own=self.own_pids), self.own_pids, gpu, on_gpu,
                                 contention.pid_namespace() if on_gpu else None)

    def _emit(self, row: dict[str, Any], samples: dict[str, Any]) -> None:
        try:
            self.writer.append(row, samples)
        except RecordError as exc:  # xmfu's own mistake: the row says so, and the sweep goes on
            row, samples = sections.unfit(row, samples, exc)
            self.writer.append(row, samples)
        self.rows.append(row)
        self.progress(row)

    def _flushes(self, phase: Phase) -> bool:
        """Whether the phase's calls are timed after a last-level-cache flush: the mamf sweep as `mamf.method` says
        (flushed by default, as mamf-finder measures the published achievable figures), the rest as
        `timing.flush_l2` says."""
        cfg = self.ctx.config
        return cfg.mamf.method == "flushed" if phase.name == "mamf" else cfg.timing.flush_l2

    def _flush(self) -> Callable[[], Any]:
        """The last-level-cache flush, allocated once per run."""
        if self._flush_fn is None:
            # on the device wherever torch's timer there flushes per call (CUDA/ROCm, and device-event accelerators
            # such as an Intel GPU: engine/timers.py timer_for); host memory elsewhere
            on_gpu = sync_rule("torch", self.ctx.platform.kind).method in (CUDA_EVENT, DEVICE_EVENT)
            self._flush_fn, self.flush_bytes = flush_buffer(self.ctx.device.cache_bytes,
                                                            self.ctx.torch_device if on_gpu else None)
        return self._flush_fn

    def _recorder(self) -> Recorder | None:
        cfg = self.ctx.config.telemetry
        if not (cfg.enabled and self.sampler and self.sampler.available):
            return None
        recorder = Recorder(self.sampler, cfg.rate_hz)
        recorder.start()
        return recorder

    def _row(self, phase: Phase, case: Case, a: Attempt, timed_out: bool,
             started: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The row and its samples record, section by section in the order their inputs exist (row_sections.py)."""
        cfg, p = self.ctx.config, a.prepared
        if p is not None and p.case is not None:
            case = p.case  # as the backend ran it (e.g. its world size settled)
        flops, timing_valid = case.flops(), bool(p and p.timing_valid)
        row = sections.identity(self.run_id, phase.name, case, a, self.ctx)
        row.update(sections.conditions(a, self.ctx, started, self.clocks, self.contention))
        row.update(self._key(phase, case, a))
        summary = sections.summary_of(a, cfg)
        method = self._method_fields(p, phase) if summary is not None else {}
        row.update(sections.timing(a, summary, cfg, timed_out, method, timing_valid, row["timing_note"]))
        row.update(sections.rank_fields(a))
        row.update(self._figures(phase, case, a, row, summary))
        row.update(sections.closing(flops, a.check))
        samples = sections.samples_record(self.run_id, case, a)
        row["contention"] = sections.own_contention(row, samples)
        return row, samples

    def _key(self, phase: Phase, case: Case, a: Attempt) -> dict[str, Any]:
        """The comparability key and its fields (a plug-in's release joins them: a new version of the kernel starts
        a new series), the plug-in's provenance and the scale the row ran at."""
        fields = comparability_fields(case.workload, case.params(), case.dtype, case.flop_convention,
                                      self._protocol(a.prepared, phase))
        impl = phase.workload.implementations.get(a.backend)
        plugin = dict(impl.plugin) if impl is not None and impl.plugin else None
        if plugin:
            fields["plugin"] = {k: plugin.get(k) for k in ("object", "package", "version")}
        return {"comparability_key": comparability_key(fields), "comparability": fields,
                **sections.provenance(plugin, self.ctx.config, phase.name)}

    def _figures(self, phase: Phase, case: Case, a: Attempt, row: dict[str, Any],
                 summary: Summary | None) -> dict[str, Any]:
        """What follows from the time: rates, the workload's own figures, the steady state, utilization against
        the peak and the achievable figure, telemetry."""
        cfg, p, s = self.ctx.config, a.prepared, a.series
        flops, timing_valid, note = case.flops(), row["timing_valid"], row["timing_note"]
        tput: dict[str, Any] = {"tflops": None, "tflops_ci95": None, "bandwidth_gbps": None}
        if summary is not None and flops > 0:  # a bandwidth workload (collectives) has no FLOPs and no MFU
            tput = throughput(flops, case.bytes_moved(), summary)
        peak = roofline.compute_roof(self.ctx, case)  # the row's compute roof, as the floor judged it
        out = {**tput, **sections.extras(case, a, row["time_s"], peak.tflops, timing_valid, self.ctx.platform.kind)}
        out.update(self._case_figures(case, a, row["time_s"], timing_valid, note))
        out["roofline"] = roofline.record_for(self.ctx, case, peak, (row["time_s"] or {}).get("median")
                                              if timing_valid else None)
        if cfg.timing.sustain_s > 0 and a.status == "ok" and s and s.fixed is None:
            out["steady_state"] = steady_state(s.samples, s.intervals, cfg.timing.window_s, cfg.timing.steady_tolerance,
                                               self.readings, self.sampler.energy_wrap_j if self.sampler else None,
                                               flops)
        invalid, timed = note if p and not timing_valid else None, "flushed" if self._flushed(phase, p) else "warm"
        out.update(utilization(tput["tflops"], peak, invalid, self.achievable, timed))
        out.update(format_utilization(case, tput["tflops"], self.ctx.device, peak, invalid, cfg.cpu_clock_ghz))
        out.update(self._achievable_method(phase, p, {**row, **out}))
        # After utilization: the clock-adjusted MFU is derived from `mfu`, which must exist by now.
        out["telemetry"] = run_telemetry.of_backend(self.sampler, self.readings, cfg.telemetry.rate_hz, a.series,
                                                    {**row, **out}, peak.clock_mhz) if a.status == "ok" else None
        limit, tel = (out["telemetry"] or {}).get("power_limit_w"), cfg.telemetry
        out["energy"] = run_telemetry.energy(self.energy_check, self.sampler, self.readings, tel.rate_hz, a.series,
                                             {**row, **out}, limit, self.ctx.device) if a.status == "ok" else None
        return out

    def _case_figures(self, case: Case, a: Attempt, time_s: dict | None, timing_valid: bool,
                      note: str) -> dict[str, Any]:
        """Figures a workload derives from its own raw samples through the optional case method
        `figures(time_s, samples_per_repeat, membw_peak, invalid_timing)` (e.g. per-token latency percentiles,
        memory-bandwidth utilisation against the device's peak memory bandwidth); {} for other workloads."""
        figures = getattr(case, "figures", None)
        if figures is None or a.status != "ok":
            return {}
        s = a.series
        samples = sections.per_repeat(s) if s and s.samples and timing_valid else []
        membw = lookup_membw(self.ctx.device, override=self.ctx.config.peak_membw_gbps)
        return figures(time_s, samples, membw, None if timing_valid else note)

    def _protocol(self, p: Prepared | None, phase: Phase) -> dict[str, Any]:
        """The run's protocol as this row was timed: `cuda_graph` is named only where graphs were replayed, so a
        row timed with plain events (JAX, a training step) keys like one from a run without timing.cuda_graph. The
        mamf sweep names `flush_l2` as `mamf.method` chose it (RunConfig.protocol)."""
        out = self.ctx.config.protocol(phase.name)
        if out.get("cuda_graph") and (p is None or self._method_fields(p, phase).get("cuda_graph") is not True):
            del out["cuda_graph"]
        return out

    def _method_fields(self, p: Prepared, phase: Phase) -> dict[str, Any]:
        """Which of the optional timing methods applied to this backend, and why not where asked for."""
        t, torch_gpu = self.ctx.config.timing, p.framework == "torch" and self.ctx.platform.kind in ("cuda", "rocm")
        flushed = self._flushes(phase)
        out: dict[str, Any] = {}
        if t.cuda_graph:
            # a flushed sweep times each call alone after its flush: a graph's back-to-back replays would skip it
            out["cuda_graph"] = (f"not applied: {p.framework} on {self.ctx.platform.kind}" if not torch_gpu
                                 else f"not applied: {p.no_cuda_graph}" if p.no_cuda_graph
                                 else "not applied: mamf.method=flushed times each call alone after a cache flush "
                                      "(mamf.method=warm replays graphs)" if flushed else True)
        if flushed:
            out["flush_l2_bytes"] = self.flush_bytes if self._flushed(phase, p) else (
                "not applied: JAX runs whole compiled programs, which a flush cannot split" if p.framework == "jax"
                else "not applied: a read-back timer times whole samples, which a flush cannot split")
        return out

    def _flushed(self, phase: Phase, p: Prepared | None) -> bool:
        """Whether this backend's calls were each timed after a cache flush: the phase flushes, and neither JAX
        (whole compiled programs) nor a read-back timer (whole samples) is in the way."""
        return self._flushes(phase) and p is not None and p.framework != "jax" and \
            sync_rule(p.framework, self.ctx.platform.kind).method != READ_BACK

    def _achievable_method(self, phase: Phase, p: Prepared | None, row: dict[str, Any]) -> dict[str, Any]:
        """A sweep row: how it was timed (`flushed` only where the flush ran: never for JAX). A row divided by an
        achievable peak: how that peak was measured, beside the figure it divides by."""
        if phase.name == "mamf":
            return {"achievable_method": "flushed" if self._flushed(phase, p) else "warm"}
        if row.get("achievable_tflops") is not None and self.achievable:
            return {"achievable_method": self.achievable.get("method", "not stated")}
        return {}

    def _set_achievable(self, phase: Phase) -> None:
        best = max((r for r in self.rows if r["phase"] == phase.name and r["status"] == "ok"
                    and r["timing_valid"] and r["tflops"]), key=lambda r: r["tflops"], default=None)
        if best is None:
            return
        self.achievable = {"tflops": best["tflops"], "source": "mamf sweep in this run", "dtype": best["dtype"],
                           "backend": best["backend"], "case_id": best["case_id"], "params": best["params"],
                           "method": best["achievable_method"]}
        self.writer.update(achievable=self.achievable)

    def drift(self) -> dict[str, Any]:
        """Clock and temperature at the run's first and last readings (run_telemetry.drift)."""
        return run_telemetry.drift(self.first_reading, self.last_reading)
