"""One HTML table for the pages xmfu writes (report, verdict page, history page): every header and cell escaped,
an optional CSS class per row (e.g. `bad` for a row that is not ok)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any


def html_table(header: Sequence[Any], rows: Sequence[Sequence[Any]],
               classes: Sequence[str | None] | None = None) -> str:
    """`<table>` with `header` and `rows` (each cell shown as str(cell), escaped); `classes[i]` names row i's
    class, None or "" for none."""
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join(f"<tr{f' class={classes[i]}' if classes and classes[i] else ''}>"
                   + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for i, row in enumerate(rows))
    return f"<table><tr>{head}</tr>{body}</table>"
