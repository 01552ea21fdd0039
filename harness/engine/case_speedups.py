"""Each timed backend of a case against the run's baseline backend: the paired speedup its row carries.

Paired by interleaving round (results/statistics/speedup.py: whole rounds resampled, the same rounds for both), so
drift that hit both backends in the same round stays paired. No verdict where either row was contended (its
contention record says so: the case's, or its own warm-up's, engine/row_sections.py own_contention) or too few
rounds were paired (stats.judge): validation reads the verdict under the same rule (results/rederive/row_checks.py).
"""

from __future__ import annotations

from typing import Any

from xmfu.harness.engine.attempts import Attempt
from xmfu.harness.engine.settings import RunConfig
from xmfu.harness.engine.timing import Series
from xmfu.harness.results.statistics.speedup import paired_speedup


def case_speedups(attempts: list[Attempt], rows: list[dict[str, Any]],
                  cfg: RunConfig) -> dict[str, dict[str, Any] | None]:
    """backend -> its speedup record (None: no paired round), for every timed backend but the baseline; {} where the
    baseline has no timed row. `rows`: the case's rows, one per attempt, as written (their contention records)."""
    contended = {a.backend: bool((r.get("contention") or {}).get("contended"))
                 for a, r in zip(attempts, rows, strict=True)}
    base = next((a for a in attempts if a.backend == cfg.baseline), None)
    if base is None or not _timed(base):
        return {}
    out: dict[str, dict[str, Any] | None] = {}
    for a in attempts:
        if a is base or not _timed(a):
            continue
        result = paired_speedup(base.backend, _paired(base.series), _paired(a.series), cfg.equivalence_margin,
                                cfg.timing.bootstrap_resamples,
                                contended=contended[a.backend] or contended[base.backend])
        out[a.backend] = result.as_dict() if result else None
    return out


def _timed(a: Attempt) -> bool:
    return a.status == "ok" and bool(a.series) and a.prepared is not None and a.prepared.timing_valid


def _paired(s: Series) -> tuple[list[float], list[int], list[int]]:
    return s.samples, s.rounds, s.sample_repeats
