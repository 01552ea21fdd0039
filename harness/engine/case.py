"""The interfaces a workload implements: a case (one shape), and what a backend prepares for it.

The engine only sees these protocols; it never imports a workload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Check:
    """Outcome of comparing a backend's output with the fp64 reference."""

    ok: bool
    error: float  # the metric named by `metric`
    tolerance: float
    metric: str
    checked: str  # what was compared, e.g. "all 4096x4096 elements" or "rows 0-15, ..."

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "tolerance": self.tolerance, "metric": self.metric,
                "checked": self.checked}


class Case(Protocol):
    """One point of a workload's sweep, with its own FLOP and byte formulas and its reference."""

    workload: str
    dtype: str
    flop_convention: str

    @property
    def case_id(self) -> str: ...

    def params(self) -> dict[str, Any]: ...

    def flops(self) -> float: ...

    def bytes_moved(self) -> float: ...

    def check_rows(self) -> Any:
        """What to compare (None: everything). Large cases pick edge and sampled rows or heads; the
        backend's `result` receives this and returns the matching host arrays."""
        ...

    def check(self, result: Any) -> Check:
        """Compare a backend's result (float64 host arrays, one or several) with the reference."""
        ...

    # Optional: `memory_bytes()`, the least memory one backend's run of the case holds at once (engine/cost.py uses
    # it to refuse, on a CPU, what cannot fit); without it, `bytes_moved()` stands in.


@dataclass(frozen=True)
class FixedPlan:
    """Deterministic sampling: every rank of a multi-process run must issue exactly the same calls, so no
    time- or CI-based stop rule may apply. `inner` back-to-back calls per sample; `before_sample` (e.g. a
    barrier) runs outside the timed region."""

    warmup: int
    samples: int
    inner: int
    before_sample: Callable[[], Any] | None = None


@dataclass
class Prepared:
    """What a backend hands the engine: a zero-argument callable plus a way to read its result.

    Everything done before returning this (allocation, compilation, autotuning) is not timed.
    """

    fn: Callable[[], Any]
    result: Callable[[Any], Any]  # float64 host copies of the outputs `Case.check_rows()` selects
    framework: str  # picks the timer: "torch", "jax" or "host"
    timing_valid: bool = True
    timing_note: str = ""
    notes: dict[str, Any] = field(default_factory=dict)  # precision, kernel config, compile time...
    peak_memory: Callable[[], int | None] | None = None  # device bytes at peak, read after timing
    peak_memory_source: str = "device allocator peak"  # what `peak_memory` reads, said in the row
    fixed: FixedPlan | None = None  # set: sampled by this plan instead of the adaptive stop rule
    gather: Callable[[list[float]], list[list[float]]] | None = None  # every rank's samples (multi-process)
    rank_combine: str = "mean"  # per sample index across ranks: "mean" (nccl-tests' default) or "max"
    # Checked on another (smaller) case than the row's: an untimed backend too slow for the full size (Triton's
    # interpreter) still proves its kernels correct. `result` then answers for this case.
    check_case: Any = None
    # Per-event latencies (e.g. one decode step per sample, for time-per-token percentiles): a fixed number of
    # calls per sample instead of enough to last timing.min_sample_s, and a hook run before every timed sample,
    # outside the timed region (e.g. to move on to the next cache position; repeated calls within a sample,
    # warm-up calls and JAX's drain call then repeat the same work).
    calls_per_sample: int | None = None
    before_sample: Callable[[], Any] | None = None
    # The case as this backend runs it, where preparing settled something the expanded case left open (e.g. a
    # distributed step's world size): the row's params, FLOPs and figures come from it. None: the case itself.
    case: Any = None
    # Companion callables timed with the same timer and plan as `fn`, sample by sample in turn with it, e.g. the
    # step with its collectives removed; rows get each one's time statistics under `variants`.
    variants: dict[str, Callable[[], Any]] = field(default_factory=dict)
    # Files for the bundle (name -> content), e.g. a profiler trace; attached by the runner after timing. Only
    # the writing rank (rank 0) keeps them.
    attachments: dict[str, bytes | str] = field(default_factory=dict)
    # Why `fn` (and its variants) cannot be captured in a CUDA/HIP graph, e.g. a training step whose optimizer was
    # built with capturable=False. Set: timing.cuda_graph times it with events and its row says
    # `cuda_graph: not applied: <this>`, instead of a capture error failing the row or, across ranks, the run.
    no_cuda_graph: str = ""
    # timing.fresh_inputs: `fresh_inputs(case)` writes the inputs of `case` (the row's case at a new, unpredictable
    # seed) into the buffers `fn` reads, so that no timed call sees the inputs of another (GPU MODE
    # reference-kernels #160, #170: outputs replayed from a cache keyed by input identity or content). The engine
    # calls it before every timed call, outside the timing, and re-checks the last timed output against that case.
    # It returns once the inputs are in place (a JAX backend blocks on its new arrays: its timer is perf_counter).
    # None: this backend cannot take fresh inputs (under timing.fresh_inputs=true its row is skipped, saying so).
    fresh_inputs: Callable[[Any], None] | None = None
    # `output(returned, rows)`: float64 host copies of the `rows` (Case.check_rows) of what one call of `fn`
    # returned, computing nothing: after the timed loop the engine re-checks the last timed call's output with it
    # (engine/recheck.py), so an output cached from other inputs, or left to `result` to compute untimed, fails
    # the row. None: a built-in backend's row says it was not re-checked; a plug-in's output is read as the array
    # its call returns (plugins.py).
    output: Callable[[Any, Any], Any] | None = None
    # Figures the backend recorded while its calls ran (e.g. a mixture-of-experts step's routing imbalance, step by
    # step), read after timing: row fields by name, each declared in the row schema (results/schema/row.py).
    recorded: Callable[[], dict[str, Any]] | None = None


class RunAborted(Exception):
    """Raised by a backend when the run cannot go on (a dead rank, a broken process group): the case fails,
    the bundle is finalised as `partial`, and the run ends instead of hanging on the next collective."""


class Unavailable(Exception):
    """Raised by prepare() when a backend cannot run this case here; becomes a `skipped` row."""
