"""The progress display: plain numbered lines in a log, nothing on other ranks."""

from __future__ import annotations

import io

import pytest

from tests.results.rows import valid_row
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.render.progress import Progress
from xmfu.harness.results.schema.row import Row


def _row(**fields) -> Row:
    """A main-phase row as the display reads it (a record)."""
    return typed(valid_row(phase="main", **fields))


def test_plain_lines_say_where_the_sweep_stands():
    out = io.StringIO()
    progress = Progress(4, stream=out, live=False)
    progress(_row(case_id="a"))
    progress(_row(case_id="a", backend="jax"))
    progress(_row(case_id="b"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("[case 1/4, 0:00 elapsed, ETA ")
    assert lines[2].startswith("[case 2/4") and "b torch: ok" in lines[2]


def test_other_ranks_say_nothing_and_a_terminal_gets_a_live_line():
    out = io.StringIO()
    Progress(2, stream=out, live=False, enabled=False)(_row())
    assert out.getvalue() == ""
    live = Progress(2, stream=out, live=True)
    live(_row())
    live.close()
    assert "c1 torch: ok" in out.getvalue()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _shows(out: io.StringIO, text: str, within_s: float = 3.0) -> bool:
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if text in out.getvalue().replace("\n", ""):  # rich wraps the live line at its width
            return True
        time.sleep(0.01)
    return False


def test_a_log_gets_one_plain_line_per_step():
    out = io.StringIO()
    progress = Progress(2, stream=out, live=False)
    progress.step("main", "a", "torch", "preparing")
    progress.step("main", "a", "torch", "compiling/first call")
    progress(_row(case_id="a"))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[case 1/2") and lines[0].endswith("a torch: preparing")
    assert lines[1].endswith("a torch: compiling/first call") and "a torch: ok" in lines[2]
    assert progress._ticker is None  # a log is written at step changes only: no thread


def test_a_terminal_line_ticks_while_a_step_runs_and_stops_on_an_interrupt():
    out, clock = io.StringIO(), _Clock()
    with pytest.raises(KeyboardInterrupt), Progress(3, stream=out, live=True, tick_s=0.01, clock=clock) as progress:
        progress.step("main", "inference-bf16-1b-prefill", "torch_compile", "compiling/first call")
        clock.now += 65  # a minute of compiling, no row yet: the line still moves
        assert _shows(out, "inference-bf16-1b-prefill torch_compile: compiling/first call 1:05")
        raise KeyboardInterrupt
    assert not progress._ticker.is_alive() and progress._status is None
