"""What runs where: the suite (workload x backend x dtype x variant) against platform/device, from rows.

A cell holds every row of its suite entry on that platform and device (all sizes): `ok` when each of them
ran and matched the reference, otherwise the worst status among them with its reason. Worst first: a wrong
answer (`incorrect`) outranks a crash (`failed`), which outranks a declined case (`skipped`); a suite entry
with no row at all on a platform is `not run`. The share per platform is its `ok` cells over the whole suite,
the "what runs on day one" figure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

from xmfu.harness.results.schema.row import Row

WORST_FIRST = ("incorrect", "failed", "skipped", "ok")
NOT_RUN = "not run"
# The parameters that change what is computed rather than how big it is (attention: causal or not, forward or
# forward+backward; collectives: which collective).
VARIANT_PARAMS = {"attention": ("causal", "mode"), "collectives": ("op",)}

Suite = tuple[str, str, str, str]  # workload, backend, dtype, variant
Column = tuple[str, str]  # platform, device


@dataclass(frozen=True)
class Cell:
    status: str  # ok | incorrect | failed | skipped | not run
    reason: str  # the first reason among the rows with the cell's status; "" when ok
    ok: int  # rows that ran correctly
    total: int  # rows


@dataclass
class Coverage:
    suite: list[Suite]
    columns: list[Column]
    cells: dict[tuple[Suite, Column], Cell] = field(default_factory=dict)

    def cell(self, entry: Suite, column: Column) -> Cell:
        return self.cells.get((entry, column), Cell(NOT_RUN, "no row for this platform and device", 0, 0))

    def share(self, column: Column) -> float:
        """The fraction of the suite whose every row ran correctly on `column`."""
        ok = sum(1 for entry in self.suite if self.cell(entry, column).status == "ok")
        return ok / len(self.suite) if self.suite else 0.0


@dataclass(frozen=True)
class Entry:
    """One row as the matrix sees it: a bundle row (`of_row`) or a history store's row (the store keeps its
    variant, and no reason)."""

    workload: str
    backend: str
    dtype: str
    variant: str  # 'causal fwd_bwd', 'non-causal fwd', 'all_reduce'; '' for workloads without variants
    platform: str
    device: str
    status: str
    reason: str = ""


def variant(row: Row) -> str:
    """'causal fwd_bwd', 'non-causal fwd', 'all_reduce'; '' for workloads without variants."""
    words = []
    for name in VARIANT_PARAMS.get(row.workload, ()):
        v = row.params.get(name)
        if isinstance(v, bool):
            words.append(name if v else f"non-{name}")
        elif v is not None:
            words.append(str(v))
    return " ".join(words)


def of_row(row: Row) -> Entry:
    return Entry(row.workload, row.backend, row.dtype, variant(row), row.platform, row.device, row.status,
                 str(row.reason or ""))


def _cell(entries: list[Entry]) -> Cell:
    ok = sum(1 for e in entries if e.status == "ok")
    worst = min((e.status for e in entries), key=lambda s: WORST_FIRST.index(s) if s in WORST_FIRST else 0)
    reason = "" if worst == "ok" else next((e.reason for e in entries if e.status == worst), "")
    return Cell(worst, reason, ok, len(entries))


def coverage(entries: Iterable[Entry]) -> Coverage:
    """The matrix for any rows (one bundle or many, any platforms), each as its Entry."""
    found: dict[tuple[Suite, Column], list[Entry]] = defaultdict(list)
    for e in entries:
        found[((e.workload, e.backend, e.dtype, e.variant), (e.platform, e.device))].append(e)
    suite = sorted({entry for entry, _ in found})
    columns = sorted({column for _, column in found})
    return Coverage(suite, columns, {key: _cell(part) for key, part in found.items()})


def _td(cell: Cell) -> str:
    if cell.status == "ok":
        text = f"ok ({cell.ok}/{cell.total})" if cell.total > 1 else "ok"
    else:
        count = f" ({cell.ok}/{cell.total} ok)" if cell.total > 1 else ""
        reason = cell.reason if len(cell.reason) <= 80 else cell.reason[:79] + "…"  # in full on hover (title)
        text = f"{cell.status}{count}" + (f": {reason}" if reason else "")
    css = "cov-" + cell.status.replace(" ", "-")
    return f'<td class="{css}" title="{escape(cell.reason)}">{escape(text)}</td>'


def render_html(cov: Coverage) -> str:
    """The matrix as an HTML table, every text escaped, with the share per platform in the last row."""
    if not cov.suite:
        return "<p>No rows.</p>"
    head = "".join(f"<th>{escape(p)}<br>{escape(d)}</th>" for p, d in cov.columns)
    body = "".join(
        f"<tr><td>{escape(w)}</td><td>{escape(b)}</td><td>{escape(t)}</td><td>{escape(v)}</td>"
        + "".join(_td(cov.cell(entry, c)) for c in cov.columns) + "</tr>"
        for entry in cov.suite for w, b, t, v in [entry])
    shares = "".join(
        f"<td><b>{100 * cov.share(c):.0f}%</b> ({sum(cov.cell(e, c).status == 'ok' for e in cov.suite)} of "
        f"{len(cov.suite)})</td>" for c in cov.columns)
    return (f'<table class="coverage"><tr><th>workload</th><th>backend</th><th>dtype</th><th>variant</th>{head}'
            f"</tr>{body}<tr><td colspan=4><b>runs correctly</b></td>{shares}</tr></table>")
