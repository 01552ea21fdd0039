"""What runs on day one, over time: the coverage matrix (harness/results/analysis/coverage.py) of each UTC day of a
history store, the share of the suite that runs correctly per platform and device, and the day each cell
turned ok ("the kernel that landed on ROCm forty days later" is a cell turning green on a date).

A day's suite is every (workload, backend, dtype, variant) any platform ran that day; a platform that ran
that day but has no row for an entry counts it `not run`. Days on which a platform did not run are not
points of its line.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from html import escape
from typing import Any

from xmfu.harness.results.analysis import coverage
from xmfu.harness.results.analysis.coverage import Column, Coverage, Suite
from xmfu.harness.results.history import trend
from xmfu.harness.results.history.stored import Stored
from xmfu.harness.results.plots import figures


@dataclass(frozen=True)
class CellHistory:
    entry: Suite
    column: Column
    first_run: date  # the first day this column ran this entry
    turned_ok: date | None  # the day its latest run of ok days began; None when not ok now
    ok_from_first_run: bool
    latest: str  # the status on the column's latest day
    reason: str
    first_ok_elsewhere: date | None  # the first day any other column ran the entry correctly

    @property
    def lag_days(self) -> int | None:
        """How many days after another platform this one got the entry right (None: not behind, or not ok)."""
        if self.turned_ok is None or self.first_ok_elsewhere is None:
            return None
        lag = (self.turned_ok - self.first_ok_elsewhere).days
        return lag if lag > 0 else None


def entry(row: Stored) -> coverage.Entry:
    """A store row as the coverage matrix sees it: the variant it was stored with ('' in a file written before the
    column), no reason (the store has none)."""
    return coverage.Entry(row.workload, row.backend, row.dtype, str(row.variant or ""), row.platform, row.device,
                          row.status)


def by_day(rows: Sequence[Stored]) -> dict[date, Coverage]:
    """The coverage matrix of each UTC day's rows."""
    days: dict[date, list[Stored]] = defaultdict(list)
    for r in rows:
        days[r.created.date()].append(r)
    return {day: coverage.coverage(map(entry, part)) for day, part in sorted(days.items())}


def shares(days: dict[date, Coverage]) -> dict[Column, list[tuple[date, float]]]:
    """Per platform and device, the share of that day's suite it ran correctly, day by day."""
    out: dict[Column, list[tuple[date, float]]] = defaultdict(list)
    for day, cov in days.items():
        for column in cov.columns:
            out[column].append((day, cov.share(column)))
    return dict(out)


def _statuses(days: dict[date, Coverage]) -> dict[tuple[Suite, Column], list[tuple[date, Any]]]:
    """Each cell's status on every day its column ran and its entry was in the suite."""
    out: dict[tuple[Suite, Column], list[tuple[date, Any]]] = defaultdict(list)
    for day, cov in days.items():
        for column in cov.columns:
            for entry in cov.suite:
                out[(entry, column)].append((day, cov.cell(entry, column)))
    return out


def cells(days: dict[date, Coverage]) -> list[CellHistory]:
    """Every cell's history: when it first ran, when it turned ok, how far behind the first platform that
    ran the entry correctly; cells that turned ok latest first, then those not ok yet."""
    found = _statuses(days)
    first_ok: dict[Suite, dict[Column, date]] = defaultdict(dict)
    for (entry, column), seq in found.items():
        ok_days = [d for d, c in seq if c.status == "ok"]
        if ok_days:
            first_ok[entry][column] = ok_days[0]
    out = []
    for (entry, column), seq in found.items():
        run_start = None
        for day, cell in seq:
            run_start = (run_start or day) if cell.status == "ok" else None
        elsewhere = [d for c, d in first_ok[entry].items() if c != column]
        latest = seq[-1][1]
        real = [(d, c) for d, c in seq if c.status != coverage.NOT_RUN]
        first = (real or seq)[0][0]
        out.append(CellHistory(entry, column, first, run_start, run_start == first,
                               latest.status, latest.reason, min(elsewhere) if elsewhere else None))
    return sorted(out, key=lambda c: (c.turned_ok is None, -(c.turned_ok or date.min).toordinal(), c.entry, c.column))


def lost(rows: Sequence[Stored], run_ids: Sequence[str]) -> list[str]:
    """Cells these runs made not ok on a platform where the column's previous day had them ok."""
    mine = [r for r in rows if r.run_id in set(run_ids)]
    if not mine:
        return []
    today = coverage.coverage(map(entry, mine))
    latest = max(r.created.date() for r in mine)
    earlier = by_day([r for r in rows if r.created.date() < latest])
    out = []
    for column in today.columns:
        before = next((cov for day, cov in reversed(earlier.items()) if column in cov.columns), None)
        if before is None:
            continue
        for suite_entry in today.suite:
            was, now = before.cell(suite_entry, column), today.cell(suite_entry, column)
            if was.status == "ok" and now.status != "ok":
                out.append(f"{' '.join(x for x in suite_entry if x)} on {column[0]} {column[1]}: ok before, "
                           f"{now.status} now ({now.reason})")
    return out


def latest_rows(rows: Sequence[Stored]) -> list[Stored]:
    """Each platform and device's rows of its latest day: the matrix as it stands."""
    last: dict[Column, date] = {}
    for r in rows:
        column, day = (r.platform, r.device), r.created.date()
        last[column] = max(last.get(column, day), day)
    return [r for r in rows if r.created.date() == last[(r.platform, r.device)]]


@figures.styled
def figure(found: dict[Column, list[tuple[date, float]]], events: Sequence[tuple[Any, str]] = ()) -> Any:
    """The share of the suite running correctly per platform and device over time (steps: a cell turning ok
    is a step up on its day)."""
    from matplotlib.ticker import PercentFormatter

    fig, (ax,) = figures.figure(3.4)
    for k, (column, points) in enumerate(sorted(found.items())):
        ax.step([trend.moment(d) for d, _ in points], [v for _, v in points], where="post", marker="o",
                markersize=4, color=figures.COLORS[k % len(figures.COLORS)], label=figures.label(" ".join(column)))
    trend.events(ax, events)
    ax.set_ylim(-0.03, 1.05)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    trend.date_axis(ax, {"coverage": {" ".join(c): list(p) for c, p in found.items()}})
    ax.set_ylabel("share of the day's suite that runs correctly")
    ax.set_xlabel("date of the run (UTC)")
    figures.legend(ax, len(found))
    figures.title(fig, "What runs on day one, over time", "one line per platform and device; a step up is a cell "
                  "turning ok")
    return fig


def table_html(found: Sequence[CellHistory]) -> str:
    header = ("workload", "backend", "dtype", "variant", "platform", "device", "first run", "turned ok",
              "ok elsewhere since", "days behind", "latest status")
    body = []
    for c in found:
        turned = "not ok yet" if c.turned_ok is None else c.turned_ok.isoformat() + (
            " (ok from its first run)" if c.ok_from_first_run else "")
        latest = c.latest + (f": {c.reason}" if c.reason and c.latest != "ok" else "")
        cells_ = [*c.entry, *c.column, c.first_run.isoformat(), turned,
                  c.first_ok_elsewhere.isoformat() if c.first_ok_elsewhere else "", c.lag_days or "", latest]
        css = "cov-ok" if c.latest == "ok" else "cov-" + c.latest.replace(" ", "-")
        body.append(f'<tr class="{css}">' + "".join(f"<td>{escape(str(x))}</td>" for x in cells_) + "</tr>")
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    return f"<table><tr>{head}</tr>{''.join(body)}</table>" if body else "<p>No rows.</p>"
