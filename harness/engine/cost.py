"""What a run will cost on a CPU, known before it starts: the least compute its cases need at this CPU's peak and
the least memory its largest case holds (issue 42 item 8: `model=1b` began preparing a 24 GB model on a 23.5 GiB
machine, `experiment=mamf` showed an ETA of 14:36 and `-m dtype=fp32,bf16` ran 2048^3-8192^3, all without a word).

Both figures are lower bounds, never estimates of the run's length: compute is the cases' FLOPs at the CPU's
peak estimate (harness/machine/peaks.py), which a real run does not reach, times the fewest calls a case takes
(its check, `timing.warmup_min_iters` warm-up calls, one sample); memory is a case's `memory_bytes()` where it
declares one (the bytes one backend's run must hold at once), else its compulsory traffic `bytes_moved()` (inputs
and outputs, all resident while a call runs). Start-up, compiles and the fp64 references come on top. A lower
bound above the machine's memory cannot fit: the front door refuses the run (harness/run.py).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xmfu.harness.machine import peaks
from xmfu.harness.machine.platform import DeviceInfo

# A run whose least compute per backend reaches this, or whose largest case needs half the machine's memory, is
# named before it starts. Real CPU runs stay far below the peak: matmul 2048^3-8192^3 is 40 s at the peak of the
# project's 2-core VM, and its first case alone (2048^3, 0.6 s at the peak) did not finish in 10 minutes there
# (docs/reference-measurements.md, "GPU sizes on a CPU"); its smoke sizes are under 0.01 s.
NAMED_COMPUTE_S = 10.0
NAMED_MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class CaseCost:
    case_id: str
    flops: float
    memory_bytes: float


@dataclass(frozen=True)
class RunCost:
    """The least a run needs here: compute per backend (None without a peak) and its largest case's memory."""

    cases: int
    calls_per_case: int
    compute_s: float | None  # the cases' FLOPs x calls_per_case at the peak, for each backend that runs
    peak: peaks.Peak
    largest: CaseCost  # by memory
    heaviest: CaseCost  # by FLOPs
    machine_bytes: int | None  # the CPU's memory (MemTotal), None where unread

    @property
    def cannot_fit(self) -> bool:
        return self.machine_bytes is not None and self.largest.memory_bytes > self.machine_bytes

    @property
    def worth_naming(self) -> bool:
        big_memory = (self.machine_bytes is not None
                      and self.largest.memory_bytes >= NAMED_MEMORY_SHARE * self.machine_bytes)
        return self.cannot_fit or big_memory or (self.compute_s or 0.0) >= NAMED_COMPUTE_S


def _number(value: Any) -> float:
    """A figure a case gave, or 0 where it gave none (a plug-in's case may say None): nothing to count."""
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else 0.0


def case_cost(case: Any) -> CaseCost:
    """A case's FLOPs per call and the least memory one backend's run of it holds."""
    declared = getattr(case, "memory_bytes", None)
    memory = declared() if callable(declared) else case.bytes_moved()
    return CaseCost(str(case.case_id), _number(case.flops()), _number(memory))


def run_cost(phases: Sequence[Any], device: DeviceInfo, dtype: str, warmup_min_iters: int,
             cpu_clock_ghz: float | None = None) -> RunCost | None:
    """The least the phases' cases need on `device` (a CPU), or None for a run without cases."""
    costs = [case_cost(case) for phase in phases for case in phase.cases]
    if not costs:
        return None
    calls = 1 + warmup_min_iters + 1  # the check, the warm-up, one sample: the fewest a case is ever given
    peak = peaks.lookup(device, dtype, cpu_clock_ghz=cpu_clock_ghz)
    compute = sum(c.flops for c in costs) * calls / (peak.tflops * 1e12) if peak.tflops else None
    return RunCost(len(costs), calls, compute, peak, max(costs, key=lambda c: c.memory_bytes),
                   max(costs, key=lambda c: c.flops), device.memory_bytes)


def duration(seconds: float) -> str:
    """h:mm:ss, or m:ss under an hour."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def gigabytes(n: float) -> str:
    return f"{n / 1e9:.1f} GB ({n / 2**30:.1f} GiB)"


def compute_words(cost: RunCost, dtype: str) -> str:
    if cost.compute_s is None:
        return f"its compute is not estimated here ({cost.peak.note})"
    cases = f"{cost.cases} case{'s' if cost.cases != 1 else ''}"
    return (f"at least {duration(cost.compute_s)} of compute for each backend that runs ({cases} x "
            f"{cost.calls_per_case} calls: the check, the warm-up, one sample; the heaviest, "
            f"{cost.heaviest.case_id}, {cost.heaviest.flops / 1e12:.3g} TFLOP a call; at this CPU's {dtype} peak "
            f"estimate of {cost.peak.tflops:.3g} TFLOP/s, which real runs do not reach)")


def memory_words(cost: RunCost) -> str:
    have = f" of this machine's {gigabytes(cost.machine_bytes)}" if cost.machine_bytes else ""
    return f"at least {gigabytes(cost.largest.memory_bytes)} of memory for {cost.largest.case_id}{have}"


def describe(cost: RunCost, dtype: str) -> str:
    """One paragraph: what the run needs at least, here."""
    return f"{compute_words(cost, dtype)}; {memory_words(cost)}"


def refusal(cost: RunCost, dtype: str) -> str:
    """One paragraph: why the run cannot fit, and what can."""
    return (f"{cost.largest.case_id} cannot fit in this machine's memory: it needs at least "
            f"{gigabytes(cost.largest.memory_bytes)}, the inputs, outputs and state one backend holds at once; "
            f"this machine has {gigabytes(cost.machine_bytes or 0)}. Allowed: sizes whose largest case fits")


# The settings that shrink each built-in workload besides scale=smoke (configs/workload/*.yaml, configs/model/).
SHRINK = {"matmul": "workload.sizes=[512]", "membw": "workload.sizes=[1048576]", "transformer": "model=tiny",
          "inference": "model=tiny", "attention": "workload.seq_q=[512]",
          "grouped_matmul": "workload.shapes=[[8,4096,1024,512]]"}


def shrink(workload: str, mamf: bool) -> str:
    """How to make the run smaller, in settings."""
    ways = ["scale=smoke (every workload's smoke sizes" + (" and the 8-shape mamf sweep)" if mamf else ")")]
    if workload in SHRINK:
        ways.append(SHRINK[workload])
    if mamf:
        ways.append("shorter mamf.m, mamf.n and mamf.k lists")
    return "Smaller here: " + "; or ".join(ways)
