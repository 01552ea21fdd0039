"""The timed samples against the warm-up calls beside them in samples.jsonl (issue 42 item 17).

A forger who rescales a row's raw samples and every figure made from them (time_s, TFLOP/s, MFU, checksums) agrees
with everything `xmfu validate` re-derives from the samples; the untouched warm-up calls then tell another story.
Both are the same call timed by the same timer (harness/engine/timing.py: warm_up times single calls with
`timer.measure(fn, 1)`, a sample is the mean of `inner` back-to-back calls). What a genuine run can show:
- timed calls slower than the warm-up: contention that arrived later, throttling; in the bundles at hand (148 rows
  of one call per sample, 14 of more, CPU runs and distributed smoke runs) the timed median reached 3.3x the
  fastest warm-up call and 2.1x the warm-up calls' median;
- timed calls faster than the warm-up: the warm-up still compiling or ramping clocks (torch.compile: the timed
  median 0.78x the fastest warm-up call after the first), and, where a sample averages several calls, the launch
  and synchronisation cost a single call pays and back-to-back calls overlap (down to 0.07x): so this side is
  checked only where a sample is one call, and never for CUDA-graph replays.
A row its own run's contention check flagged (row.contention.contended: other processes took the CPU or the device)
is not checked here: on a shared 2-core machine under a load of 20, a genuine 33 us call's timed median reached
11.8x its warm-up calls' median, and genuine membw rows 9.6x faster and 8.6x slower, the scheduler and not the
kernel. Such a row is no evidence in a verdict either (xmfu compare: inconclusive, contended), so a forger gains
nothing by claiming contention.
The run applies the same rule to each row it measures (`warmup_disturbance`, engine/row_sections.py) and marks a
row past the bounds contended, with why (row.contention.warmup): a load that the case's process and run-queue
figures missed can still fall on the warm-up alone (CI's loaded machine: a torch.compile prefill's timed median
1.64x faster than its fastest warm-up call, its case not flagged), and a genuine bundle is then never refused here.
The bounds below leave those margins: a sample set scaled tenfold is refused (its row claiming no contention), a
cut by a factor k only where the genuine timed median lay within k/1.6 of the fastest warm-up call (tenfold: 6.25x;
a run whose own samples lay further from its warm-up marked itself contended); a rescaling by less than the margins
is not caught here.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

FASTER = 1.6  # a timed median below the fastest warm-up call / FASTER is refused (one call per sample)
SLOWER = 5.0  # a timed median above the warm-up calls' median x SLOWER is refused
MIN_WARMUP = 3  # warm-up calls after the first (which compiles, allocates, autotunes) needed to judge


Figures = tuple[float, float, float]  # (timed median, fastest warm-up call after the first, their median)


@dataclass(frozen=True)
class Disagreement:
    """A row's timed samples past a bound against its warm-up calls: `faster` (the timed median below the fastest
    warm-up call after the first / FASTER) or `slower` (above the warm-up calls' median x SLOWER)."""

    side: str  # "faster" or "slower"
    median: float  # the timed samples' median, s
    against: float  # the fastest warm-up call after the first (faster), or their median (slower), s
    samples: int
    calls: int  # warm-up calls after the first

    @property
    def ratio(self) -> float:
        return self.against / self.median if self.side == "faster" else self.median / self.against

    def said(self) -> str:
        """The two figures, in words: "the median of its 50 timed samples (0.00194 s) is 1.64x faster than ..."."""
        timed = f"the median of its {self.samples} timed samples ({self.median:.6g} s) is"
        calls = f"of its {self.calls} warm-up calls after the first"
        if self.side == "faster":
            return (f"{timed} {self.ratio:.3g}x faster than the fastest {calls} ({self.against:.6g} s, samples.jsonl "
                    "warmup), though both time one call")
        return f"{timed} {self.ratio:.3g}x the median {calls} ({self.against:.6g} s, samples.jsonl warmup)"


def disagreements(row: dict[str, Any], rec: dict[str, Any], figures: Figures | None = None) -> list[Disagreement]:
    """The row's timed samples against its warm-up calls, where both are there to compare and the row is not
    already contended. `figures`: this record's `warmup_figures`, where they were computed for the whole bundle
    already (None: computed here). The one rule both the run (which marks such a row contended) and validation
    (which refuses such a row that is not) apply."""
    samples, warmup = rec.get("samples"), rec.get("warmup")
    timer = row.get("timer") if isinstance(row.get("timer"), dict) else {}
    contention = row.get("contention") if isinstance(row.get("contention"), dict) else {}
    if contention.get("contended") is True:
        return []  # a contended run's warm-up and timed calls met different loads: no evidence either way
    if row.get("status") != "ok" or timer.get("cuda_graph") is True:
        return []
    if figures is None:
        if not _numbers(samples) or not _numbers(warmup) or len(warmup) < MIN_WARMUP + 1:
            return []
        figures = _figures(np.asarray(samples, dtype=np.float64)[None, :],
                           np.asarray(warmup[1:], dtype=np.float64)[None, :])[0]
    median, fastest, typical = figures
    out = []
    if rec.get("inner") == 1 and fastest > 0 and median < fastest / FASTER:
        out.append(Disagreement("faster", median, fastest, len(samples), len(warmup) - 1))
    if typical > 0 and median > typical * SLOWER:
        out.append(Disagreement("slower", median, typical, len(samples), len(warmup) - 1))
    return out


def warmup_problems(row: dict[str, Any], rec: dict[str, Any], where: str,
                    figures: Figures | None = None) -> list[str]:
    """Validation's words for each disagreement of a row that claims no contention (`disagreements`)."""
    return [f"{where}: {d.said()}; more than {_BOUND[d.side]} (samples rescaled?)"
            for d in disagreements(row, rec, figures)]


def warmup_disturbance(row: dict[str, Any], rec: dict[str, Any]) -> str | None:
    """The run's words where a row it measured disagrees with its own warm-up (`disagreements`): why the row counts
    as contended (no evidence in a verdict), or None."""
    found = disagreements(row, rec)
    if not found:
        return None
    return ("the warm-up calls and the timed samples disagree: " + "; ".join(d.said() for d in found) +
            ": the load or the clocks changed between them, or the warm-up had not ended (a longer timing.warmup_s "
            "helps); the timed samples stand, but not as evidence in a verdict")


_BOUND = {"faster": f"{FASTER:g}x is no warm-up effect", "slower": f"{SLOWER:g}x is no contention seen in a run"}


def warmup_figures(samples: list[Any], typed: bool = False) -> list[Figures | None]:
    """Per samples.jsonl record, what `warmup_problems` compares, computed for every record of one sample count and
    one warm-up count at once: numpy's medians along the rows of one array, the figures a record gets alone (a
    bundle of 4,000 rows with 400 warm-up calls each: one conversion and two reductions instead of 12,000 numpy
    calls). None: not computed here (nothing to compare, or a group holding an integer past any float), and
    `warmup_problems` looks at that record alone. `typed`: every record decoded as its typed declaration (bundle/
    records.py), which holds its samples and warm-up calls as floats: their types are not walked again."""
    out: list[Figures | None] = [None] * len(samples)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, rec in enumerate(samples):
        timed, warmup = (rec.get("samples"), rec.get("warmup")) if isinstance(rec, dict) else (None, None)
        numbers = (isinstance(timed, list) and isinstance(warmup, list) and bool(timed)) if typed \
            else json_numbers(timed) and json_numbers(warmup)
        if numbers and len(warmup) >= MIN_WARMUP + 1:
            groups.setdefault((len(timed), len(warmup)), []).append(i)
    for (n, calls), where in groups.items():
        try:  # each group's values in one pass (no list of lists for numpy to walk)
            timed = np.fromiter(chain.from_iterable(samples[i]["samples"] for i in where), np.float64,
                                len(where) * n).reshape(len(where), n)
            warmup = np.fromiter(chain.from_iterable(samples[i]["warmup"] for i in where), np.float64,
                                 len(where) * calls).reshape(len(where), calls)[:, 1:]
        except OverflowError:  # an integer past any float: no time; each record alone says so
            continue
        finite = np.isfinite(timed).all(axis=1) & np.isfinite(warmup).all(axis=1)
        for i, figures, ok in zip(where, _figures(timed, warmup), finite, strict=True):
            out[i] = figures if ok else None
    return out


def _figures(timed: np.ndarray, after_first: np.ndarray) -> list[Figures]:
    """(timed median, fastest warm-up call, the warm-up calls' median) of each row of the two (records, n) arrays."""
    median, fastest, typical = np.median(timed, axis=1), after_first.min(axis=1), np.median(after_first, axis=1)
    return [(float(m), float(f), float(t)) for m, f, t in zip(median, fastest, typical, strict=True)]


def json_numbers(values: Any) -> bool:
    """A non-empty list of JSON numbers (no bool), by exact type as the JSON decoder gives them."""
    return isinstance(values, list) and bool(values) and set(map(type, values)) <= _NUMBER_TYPES


def _numbers(values: Any) -> bool:
    """A non-empty list of finite JSON numbers (no bool). The types are checked by exact type, as the JSON decoder
    gives them, and finiteness in one numpy pass: validation reads every sample of a bundle here."""
    if not json_numbers(values):
        return False
    try:
        return bool(np.isfinite(np.asarray(values, dtype=np.float64)).all())
    except OverflowError:  # an integer past any float: no time
        return False


_NUMBER_TYPES = {int, float}  # exact types (bool is an int subclass, and no number); map(type) runs in C
