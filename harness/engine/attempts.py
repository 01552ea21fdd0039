"""One backend's way through a case: prepared, checked, timed (or stopped with a reason), and, with
`repeats=N`, the N independent measurements of it merged into one.

A failure in one (case, backend) becomes that attempt's status and reason; the other backends go on.
"""

from __future__ import annotations

import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xmfu.harness.engine import stall
from xmfu.harness.engine.case import Case, Prepared, RunAborted, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.fresh import Fresh, FreshInputsTimer, unsupported
from xmfu.harness.engine.registry import WorkloadDef
from xmfu.harness.engine.sampler import for_a_verdict, sample_fixed_group, sample_interleaved
from xmfu.harness.engine.timers import timer_for
from xmfu.harness.engine.timing import Series, merged_series
from xmfu.harness.machine.jax_distributed import jax_processes_joined
from xmfu.harness.machine.sync import sync_rule

STATUS_ORDER = ("failed", "incorrect", "skipped", "ok")  # the worst status of a backend's repeats is its row's


@dataclass
class Attempt:
    """One backend's progress through a case: prepared, checked, then timed (or stopped with a reason)."""

    backend: str
    status: str = "ok"
    reason: str | None = None
    prepared: Prepared | None = None
    check: dict[str, Any] | None = None
    series: Series | None = None
    rank_samples: list[list[float]] | None = None  # every rank's samples, when the backend has ranks
    variants: dict[str, Series] = field(default_factory=dict)  # the prepared variants' samples, by name
    variant_rank_samples: dict[str, list[list[float]]] = field(default_factory=dict)
    fresh: Fresh | None = None  # timing.fresh_inputs: the inputs written before each call (engine/fresh.py)
    fresh_costs: list[float] = field(default_factory=list)  # seconds each write took, over every repeat
    timed_check: dict[str, Any] | None = None  # the last timed output re-checked (engine/recheck.py)


def _failure_reason(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"the backend called sys.exit({exc.code!r}): recorded as this row's failure, the run went on"
    text = f"{type(exc).__name__}: {exc}".strip()
    if "out of memory" in text.lower():
        return f"out of memory: {text}"
    return text.splitlines()[0][:500] if text else type(exc).__name__


def lockstep(workload: WorkloadDef, backend: str) -> bool:
    """Whether `backend` runs JAX alone: in a multi-process JAX run its processes run every case in lockstep, so
    its failure ends the run (RunAborted). One that failed where another did not would wait for the other in
    different collectives, and a peer that died makes gloo fail every later collective at once ("Connection
    closed by peer", seen with jax 0.10.2 on CPU), as a torch process group is broken for good
    (workloads/collectives/torch_dist.py `guarded`)."""
    return workload.implementations[backend].frameworks == ("jax",)


def _quiet(step: str) -> None:
    return None


def prepare_and_check(case: Case, ctx: RunContext, workload: WorkloadDef, backend: str,
                      on_step: Callable[[str], None] = _quiet) -> Attempt:
    """Prepare the backend's callable, call it once untimed, check its result; `on_step` hears each step as it
    begins (preparing, compiling/first call, checking), so a display can say what a long case is doing."""
    attempt = Attempt(backend)
    impl = workload.implementations[backend]
    if impl.cpu_when_named and ctx.platform.kind == "cpu" and not ctx.config.backends_named:
        return Attempt(backend, "skipped", f"on a CPU {backend} runs only when named ({impl.cpu_when_named}): "
                                           f"backends=[...,{backend}] runs it")
    try:
        ok, why = impl.available(case, ctx)
        if not ok:
            return Attempt(backend, "skipped", why)
        on_step("preparing")
        attempt.prepared = impl.prepare(case, ctx)
        stall.kick()
        why = unsupported(attempt.prepared, attempt.prepared.case or case) \
            if ctx.config.timing.fresh_inputs and attempt.prepared.timing_valid else None
        if why:
            return Attempt(backend, "skipped", why)
        if attempt.prepared.timing_valid:
            on_step("compiling/first call")
            start = time.perf_counter()
            attempt.prepared.fn()  # first call: compile / autotune / TunableOp tuning / lazy init, never timed
            attempt.prepared.notes["first_call_s"] = time.perf_counter() - start
            stall.kick()
        checked = attempt.prepared.check_case or case
        on_step("checking")
        check = checked.check(attempt.prepared.result(checked.check_rows()))
        stall.kick()
        attempt.check = check.as_dict()
        if checked is not case:
            attempt.check["case_id"] = checked.case_id
        if not check.ok:
            attempt.status = "incorrect"
            attempt.reason = (f"{check.metric} {check.error:.3g} exceeds tolerance {check.tolerance:.3g} "
                              f"({check.checked})")
    except Unavailable as exc:
        return Attempt(backend, "skipped", str(exc))
    except RunAborted:
        raise
    except (Exception, SystemExit) as exc:  # compile errors, unsupported dtypes, OOM: this row fails, the sweep
        # goes on. SystemExit too: a backend's (or a Python API candidate's) sys.exit() is its own failure, not the
        # end of every other backend's measurement. Signals arrive as KeyboardInterrupt (engine/interrupts.py).
        if lockstep(workload, backend) and jax_processes_joined() > 1:
            raise RunAborted(f"{backend} failed in a multi-process JAX run: {_failure_reason(exc)}") from None
        traceback.print_exc(limit=3, file=sys.stderr)
        return Attempt(backend, "failed", _failure_reason(exc), check=attempt.check)
    return attempt


def time_attempts(attempts: list[Attempt], ctx: RunContext, flush: Callable[[], Any] | None,
                  repeat: int = 0, case: Case | None = None) -> bool:
    """Time every attempt whose timing can mean something; the others (Triton's interpreter on a CPU) were
    checked and are recorded as not timed. Fixed plans (multi-process collectives) run as planned, the same
    on every rank. Under timing.fresh_inputs each call of `case` reads new inputs (engine/fresh.py). Returns
    True when the adaptive series ran out of time."""
    cfg = ctx.config.timing
    for a in attempts:
        p = a.prepared
        assert p is not None
        rule = sync_rule(p.framework, ctx.platform.kind)
        if p.timing_valid and not rule.proven:  # checked above; a time without a proven sync would mislead
            p.timing_valid, p.timing_note = False, rule.reason
        if p.timing_valid:
            timer = timer_for(p.framework, ctx.platform.kind, cuda_graph=cfg.cuda_graph and not p.no_cuda_graph,
                              flush=flush, device=ctx.torch_device)
            if cfg.fresh_inputs and p.fresh_inputs is not None:
                a.fresh = Fresh(p.fresh_inputs, p.case or case)
                timer = FreshInputsTimer(timer, a.fresh)
            a.series = Series(a.backend, p.fn, timer, repeat=repeat, fixed=p.fixed, keep_output=p.output is not None,
                              calls_per_sample=p.calls_per_sample, before_sample=p.before_sample)
            a.variants = {name: Series(f"{a.backend}:{name}", fn, timer, repeat=repeat, fixed=p.fixed)
                          for name, fn in p.variants.items()}
    # Variants take turns with their step: in the interleaved rounds, or sample by sample under a fixed plan.
    adaptive = [s for a in attempts if a.series and not a.series.fixed for s in (a.series, *a.variants.values())]
    if _compared(attempts, ctx.config.baseline):  # a speedup's verdict needs MIN_ROUNDS paired rounds
        cfg = for_a_verdict(cfg, ctx.config.repeats)
    timed_out = sample_interleaved(adaptive, cfg) if adaptive else False
    for a in attempts:
        if a.series and a.series.fixed:
            sample_fixed_group([a.series, *a.variants.values()])
    for a in attempts:
        if a.series and a.series.error:
            a.status, a.reason = "failed", a.series.error
        if a.fresh is not None:
            a.fresh_costs += a.fresh.costs
    return timed_out


def _compared(attempts: list[Attempt], baseline: str | None) -> bool:
    """Whether the case gives a speedup: the baseline and another backend are timed adaptively."""
    timed = [a.backend for a in attempts if a.series and not a.series.fixed]
    return baseline in timed and len(timed) > 1


def gather_ranks(attempts: list[Attempt]) -> None:
    """Collect every rank's samples (a collective call: all ranks reach it for the same case) and combine
    them per sample index, so the row's statistics describe the whole group, not one rank."""
    for a in attempts:
        p, s = a.prepared, a.series
        if not (p and p.gather and s):
            continue
        a.rank_samples = _gathered(p, s)
        a.variant_rank_samples = {name: _gathered(p, v) for name, v in a.variants.items()}
        stall.kick()


def _gathered(p: Prepared, s: Series) -> list[list[float]]:
    """Every rank's samples of one series; the series' own samples become their per-index combination."""
    per_rank = p.gather(s.samples if s.error is None else [])
    if s.error is None and all(len(r) == len(s.samples) for r in per_rank):
        combine = max if p.rank_combine == "max" else statistics.fmean
        s.samples = [combine(values) for values in zip(*per_rank, strict=True)]
    return per_rank


def release(attempts: Sequence[Attempt]) -> None:
    """Drop the callables (and the device buffers they hold) once an attempt is timed: its row needs only the
    samples, the notes and the check, and the next repeat or case needs the memory."""

    def released(*args: Any) -> Any:
        raise RuntimeError("this backend's callable was released after timing")

    for a in attempts:
        if a.prepared is not None:
            a.prepared.fn, a.prepared.result = released, released
            a.prepared.variants = dict.fromkeys(a.prepared.variants, released)
        for s in (a.series, *a.variants.values()):
            if s is not None:
                s.fn = released


def merge_repeats(repeats: Sequence[Attempt]) -> Attempt:
    """One backend's attempts over `repeats=N` as one: the worst status (naming its repeat), every sample with
    the repeat it came from, every rank's samples, the notes and check of the first repeat."""
    if len(repeats) == 1:
        return repeats[0]
    worst = min(range(len(repeats)), key=lambda i: STATUS_ORDER.index(repeats[i].status))
    first = repeats[0]
    merged = Attempt(first.backend, repeats[worst].status, None, first.prepared, repeats[worst].check,
                     timed_check=repeats[worst].timed_check, fresh_costs=[c for a in repeats for c in a.fresh_costs])
    if merged.status != "ok":
        merged.reason = f"repeat {worst + 1} of {len(repeats)}: {repeats[worst].reason}"
        merged.prepared = repeats[worst].prepared
        return merged
    timed = [a.series for a in repeats if a.series is not None]
    if timed:
        merged.series = merged_series(timed)
    for name in first.variants:
        merged.variants[name] = merged_series([a.variants[name] for a in repeats if name in a.variants])
    merged.rank_samples = _merged_ranks([a.rank_samples for a in repeats], len(timed))
    for name in first.variant_rank_samples:
        merged.variant_rank_samples[name] = _merged_ranks([a.variant_rank_samples.get(name) for a in repeats],
                                                          len(timed))
    return merged


def _merged_ranks(per_repeat: list[list[list[float]] | None], timed: int) -> list[list[float]] | None:
    """Each rank's samples over the repeats, in order (None unless every timed repeat gathered them)."""
    ranks = [r for r in per_repeat if r]
    if not ranks or len(ranks) != timed:
        return None
    return [[v for r in ranks for v in r[i]] for i in range(len(ranks[0]))]
