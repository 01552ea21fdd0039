"""The progress display: plain numbered lines in a log, nothing on other ranks."""

from __future__ import annotations

import io

from tests.results.rows import valid_row
from xmfu.harness.results.progress import Progress


def test_plain_lines_say_where_the_sweep_stands():
    out = io.StringIO()
    progress = Progress(4, stream=out, live=False)
    progress({**valid_row(case_id="a"), "phase": "main"})
    progress({**valid_row(case_id="a", backend="jax"), "phase": "main"})
    progress({**valid_row(case_id="b"), "phase": "main"})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("[case 1/4, 0:00 elapsed, ETA ")
    assert lines[2].startswith("[case 2/4") and "b torch: ok" in lines[2]


def test_other_ranks_say_nothing_and_a_terminal_gets_a_live_line():
    out = io.StringIO()
    Progress(2, stream=out, live=False, enabled=False)(valid_row())
    assert out.getvalue() == ""
    live = Progress(2, stream=out, live=True)
    live({**valid_row(), "phase": "main"})
    live.close()
    assert "c1 torch: ok" in out.getvalue()
