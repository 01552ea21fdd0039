"""States a CI can act on (issue 38, item 3): each series of a metric is in one of
`failure | regression | not_judged | insufficient_data | no_regression`, and the night is the worst state any of its
series is in. `history check --exit-on STATES` exits with the status of the worst state named that some series is
in (docs/nightly.md lists them), so a contended night need not fail a job that a regression still fails."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xmfu.harness.results.history import judge
from xmfu.harness.results.history.stored import SERIES_KEY, Stored

FAILURE, REGRESSION, NOT_JUDGED = "failure", "regression", "not_judged"
INSUFFICIENT, NO_REGRESSION = "insufficient_data", "no_regression"
STATES = (FAILURE, REGRESSION, NOT_JUDGED, INSUFFICIENT, NO_REGRESSION)  # worst first: the night is the first held
EXIT_STATUS = {FAILURE: 4, REGRESSION: 1, NOT_JUDGED: 3, INSUFFICIENT: 5, NO_REGRESSION: 0}  # 1, 3: as before
EXIT_ON = (REGRESSION, FAILURE)  # `--exit-on`'s default: what fails a job; a contended or young night does not
FAILED = ("failed", "incorrect")  # a row that ran and did not give a figure: the case is broken, not the timing


@dataclass(frozen=True)
class SeriesState:
    key: tuple  # SERIES_KEY
    metric: str
    state: str  # one of STATES
    why: str  # '' for no_regression on a clean row

    def as_dict(self) -> dict[str, Any]:
        return {**dict(zip(SERIES_KEY, self.key, strict=True)), "metric": self.metric, "state": self.state,
                "why": self.why}


def _latest_runs(rows: Sequence[Stored]) -> set[str]:
    """The latest run of each workload on each platform and device: a case's row there is tonight's word on it
    (a case dropped from the suite has none there, and its old failure is no longer the night's)."""
    latest: dict[tuple, tuple] = {}
    for r in rows:
        where = (r.platform, r.device, r.workload)
        if where not in latest or (r.created, r.run_id) > latest[where]:
            latest[where] = (r.created, r.run_id)
    return {run_id for _, run_id in latest.values()}


def _latest_row(rows: Sequence[Stored]) -> dict[tuple, Stored]:
    """SERIES_KEY -> its latest row, whatever its status."""
    out: dict[tuple, Stored] = {}
    for r in rows:
        if r.key() not in out or (r.created, r.run_id) > (out[r.key()].created, out[r.key()].run_id):
            out[r.key()] = r
    return out


def _from_latest_row(row: Stored, tonight: set[str]) -> tuple[str, str] | None:
    """(state, why) where the series' latest row in the latest run says it all: failed, or gave no timed figure."""
    if row.run_id not in tonight or (row.status == "ok" and row.timing_valid):
        return None
    if row.status in FAILED:
        return FAILURE, f"{row.status} in run {row.run_id}"
    said = row.status if row.status != "ok" else "not validly timed"
    return NOT_JUDGED, f"{said} in run {row.run_id}"


def _from_judgement(metric: str, found: dict[str, Any] | None, latest: Stored, strict: bool) -> tuple[str, str]:
    """(state, why) of a judged series from `check`'s finding on it (None: within the noise)."""
    if found is None:
        return (NOT_JUDGED, f"latest run contended: {latest.contention or 'contended'}") if latest.contended \
            else (NO_REGRESSION, "")
    change = f"{100 * found['change']:+.1f}%" if found["change"] is not None else "a change"
    if not judge.worse(metric, found["change"]):
        return NO_REGRESSION, f"improved {change}"
    if found.get("unreliable") and not strict:
        return NOT_JUDGED, f"{change}, unreliable: {found['unreliable']}: {found['why']}"
    return REGRESSION, f"{change} against the baseline {found['baseline']:.4g}"


def states(rows: Sequence[Stored], metric: str, flagged: Sequence[dict[str, Any]],
           strict: bool = False) -> list[SeriesState]:
    """Every series of `metric` (its ok, validly timed rows: judge.series) and its state; `flagged` is
    judge.check's answer on the same rows (with the rule the caller chose)."""
    found = {tuple(f[k] for k in SERIES_KEY): f for f in flagged}
    latest_any, latest_counted = _latest_row(rows), judge.latest_rows(rows, metric)
    tonight = _latest_runs(rows)
    out = []
    for key, points in judge.series(rows, metric).items():
        said = _from_latest_row(latest_any[key], tonight)
        if said is None and len(points) < judge.MIN_RUNS:
            said = INSUFFICIENT, f"{len(points)} of {judge.MIN_RUNS} runs"
        if said is None:
            said = _from_judgement(metric, found.get(key), latest_counted[key], strict)
        out.append(SeriesState(key, metric, *said))
    return out


def night(found: Sequence[SeriesState]) -> str:
    """The night's state: the worst any series is in (insufficient_data when there is no series at all)."""
    held = {s.state for s in found}
    return next((s for s in STATES if s in held), INSUFFICIENT)


def exit_status(found: Sequence[SeriesState], exit_on: Sequence[str]) -> int:
    """The status of the worst state in `exit_on` that some series is in; 0 when none is."""
    held = {s.state for s in found}
    return next((EXIT_STATUS[s] for s in STATES if s in held and s in exit_on), 0)


def counts(found: Sequence[SeriesState]) -> str:
    """'1 regression, 5 no_regression, 2 insufficient_data', worst first; states no series is in left out."""
    return ", ".join(f"{n} {s}" for s in STATES if (n := sum(1 for f in found if f.state == s)))


def parse_exit_on(text: str) -> tuple[str, ...]:
    """`--exit-on`: comma-separated states, or `none`; ValueError naming what is allowed."""
    if text.strip() == "none":
        return ()
    chosen = tuple(t.strip() for t in text.split(",") if t.strip())
    allowed = [s for s in STATES if s != NO_REGRESSION]
    wrong = [t for t in chosen if t not in allowed]
    if wrong or not chosen:
        raise ValueError(f"{', '.join(wrong) or repr(text)} is not a state to exit on. Allowed: a comma-separated "
                         f"list of {', '.join(allowed)}, or none")
    return chosen
