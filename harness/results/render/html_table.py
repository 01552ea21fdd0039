"""One HTML table for the pages xmfu writes (report, verdict page, history page): every header and cell escaped,
an optional CSS class per row (e.g. `bad` for a row that is not ok); and the pages' sections under a table of
contents."""

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


def with_contents(sections: Sequence[tuple[str, str]]) -> str:
    """`(title, HTML)` sections, each under an `<h2>` with an anchor, after a table of contents linking to each:
    a report runs to hundreds of KB (issue 42 item 12). Titles are escaped; the sections' HTML is theirs."""
    anchors = [f"section-{i + 1}" for i in range(len(sections))]
    toc = "".join(f"<li><a href='#{a}'>{escape(title)}</a></li>" for a, (title, _) in zip(anchors, sections,
                                                                                          strict=True))
    body = "".join(f"<h2 id='{a}'>{escape(title)}</h2>{html}" for a, (title, html) in zip(anchors, sections,
                                                                                          strict=True))
    return f"<nav class='contents'><b>Contents</b><ol>{toc}</ol></nav>{body}"
