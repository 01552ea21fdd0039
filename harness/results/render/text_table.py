"""Plain-text tables fitted to a terminal width: columns wrap at their own separators, never mid-word.

nccl-tests prints one line per size at a width that fits a terminal; xmfu's tables do the same by wrapping the
columns that may wrap (a shape at '-', a speedup at ' ', a flag list at ',') onto continuation lines, widest
rightmost first, until the table fits. A cell is split only between its parts, so every part is printed whole.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

GAP = "  "


@dataclass(frozen=True)
class Column:
    """A column's header, its cells (one per row), and the separator it may wrap at ('' = never wraps)."""

    header: str
    cells: Sequence[str]
    wrap_at: str = ""
    right: bool = False


def number(x: float | None, fmt: str) -> str:
    """A figure in a table cell: `fmt` applied, "-" where there is none."""
    return "-" if x is None else format(x, fmt)


def parts(text: str, sep: str) -> list[str]:
    """`text` split after each `sep`, the separator kept with the part before it ("a-b-c" -> "a-", "b-", "c")."""
    if not sep:
        return [text]
    pieces = text.split(sep)
    return [p + sep for p in pieces[:-1]] + [pieces[-1]]


def wrap_cell(text: str, width: int, sep: str) -> list[str]:
    """`text` as lines of at most `width` characters, broken only after `sep` (a part longer than `width`
    keeps its own line whole)."""
    lines: list[str] = []
    for part in parts(text, sep):
        if lines and len(lines[-1]) + len(part.rstrip()) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return [line.rstrip() for line in lines] or [""]


def _natural(col: Column) -> int:
    return max([len(col.header), *(len(c) for c in col.cells)])


def _narrowest(col: Column) -> int:
    """The width below which the column would have to cut a part."""
    longest = max([len(p.rstrip()) for c in col.cells for p in parts(c, col.wrap_at)] or [0])
    return max(len(col.header), longest)


def fit(columns: Sequence[Column], width: int | None) -> list[int]:
    """Each column's width: its natural width, the wrapping columns narrowed, rightmost first (the figures' flags
    and verdicts before what identifies the row), until the table fits `width` (None: no limit) or none can
    narrow further."""
    widths = [_natural(c) for c in columns]
    if width is None:
        return widths
    for i in reversed(range(len(columns))):
        excess = sum(widths) + len(GAP) * (len(widths) - 1) - width
        if excess <= 0:
            break
        if columns[i].wrap_at:
            widths[i] = max(_narrowest(columns[i]), widths[i] - excess)
    return widths


def render(columns: Sequence[Column], width: int | None, groups: Sequence[str] | None = None) -> list[str]:
    """The header, a rule and the rows, each row on as many lines as its wrapped cells need. `groups`: a label per
    row, printed on a line of its own before the first row of each run of rows that share it."""
    widths = fit(columns, width)

    def line(cells: Sequence[str]) -> str:
        return GAP.join(c.rjust(w) if col.right else c.ljust(w)
                        for c, w, col in zip(cells, widths, columns, strict=True)).rstrip()

    out = [line([c.header for c in columns]), GAP.join("-" * w for w in widths)]
    for i in range(len(columns[0].cells) if columns else 0):
        if groups is not None and (i == 0 or groups[i] != groups[i - 1]):
            out.append(groups[i])
        wrapped = [wrap_cell(c.cells[i], w, c.wrap_at) if c.wrap_at else [c.cells[i]]
                   for c, w in zip(columns, widths, strict=True)]
        for k in range(max(len(w) for w in wrapped)):
            out.append(line([w[k] if k < len(w) else "" for w in wrapped]))
    return out


def paragraph(text: str, width: int | None, indent: str = "") -> list[str]:
    """A note or header line wrapped at word boundaries (never cut), continuation lines indented."""
    if width is None:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
