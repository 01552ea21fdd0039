"""What a long sweep shows while it runs: case i of N, the backend just measured, elapsed time, an ETA and
the latest figure; and, while a case is under way, the step it is in (preparing, compiling/first call,
checking, timing) with the time spent in it, so a case that prepares or compiles for minutes (torch.compile,
XLA, a 1b model) is visibly alive.

A terminal gets a live line (rich) that a bounded ticker thread refreshes once a second while a step runs; a log
(CI) gets one plain line when a step starts; ranks other than 0 say nothing (rank 0 speaks for the group).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from xmfu.harness.results.render.table import progress_line
from xmfu.harness.results.schema.row import Row

TICK_S = 1.0  # the live line's refresh while a step runs: the elapsed time is printed to the second


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else (
        f"{seconds // 60}:{seconds % 60:02d}")


class Progress:
    """Counts finished cases (a case's rows arrive together) and says where the sweep stands. `close()` (or leaving
    it as a context manager) stops the ticker and the live line, whatever ended the run."""

    def __init__(self, total_cases: int, stream: TextIO | None = None, live: bool | None = None,
                 enabled: bool = True, tick_s: float = TICK_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.stream, self.enabled = max(total_cases, 1), stream or sys.stderr, enabled
        self.live = self.stream.isatty() if live is None else live
        self.clock, self.tick_s = clock, tick_s
        self.start = clock()
        self.cases: list[str] = []
        self.current: tuple[str, float] | None = None  # "case backend: step" and when that step began
        self._console: Any = None
        self._status: Any = None
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    def __call__(self, row: Row) -> None:
        if not self.enabled:
            return
        self._count(row.phase, row.case_id)
        self.current = None
        line = f"[{self.position()}] {progress_line(row)}"
        if self.live:
            self._live(line)
        else:
            print(line, file=self.stream, flush=True)

    def step(self, phase: str, case_id: str, backend: str, name: str) -> None:
        """A step of a case begins (the engine's runner calls this): `name` is preparing, compiling/first call,
        checking or timing; `backend` the backend (or the backends timed together)."""
        if not self.enabled:
            return
        self._count(phase, case_id)
        self.current = (f"{case_id} {backend}: {name}", self.clock())
        if self.live:
            self._live(None)
            self._start_ticker()
        else:
            print(f"[{self.position()}] {self.current[0]}", file=self.stream, flush=True)

    def _count(self, phase: str | None, case_id: str) -> None:
        key = f"{phase}/{case_id}"
        if key not in self.cases:
            self.cases.append(key)

    def position(self) -> str:
        """"case 3/40, 0:42 elapsed, ETA 8:45" from the cases finished so far (a case in progress counts)."""
        done = len(self.cases)
        elapsed = self.clock() - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        return f"case {done}/{self.total}, {_clock(elapsed)} elapsed, ETA {_clock(eta)}"

    def status_line(self) -> str:
        """The live line: where the sweep stands and, during a step, the step and its time so far."""
        line = f"xmfu: {self.position()}"
        if self.current is not None:
            text, since = self.current
            line += f" | {text} {_clock(self.clock() - since)}"
        return line

    def _live(self, line: str | None) -> None:
        if self._console is None:
            from rich.console import Console

            # live means a terminal (or a caller who says so): rich then redraws the line in place
            self._console = Console(file=self.stream, highlight=False, force_terminal=True)
            self._status = self._console.status("")
            self._status.start()
        if line is not None:
            self._console.print(line, markup=False, soft_wrap=True)
        self._status.update(self.status_line())

    def _start_ticker(self) -> None:
        if self._ticker is None and not self._stop.is_set():
            self._ticker = threading.Thread(target=self._tick, name="xmfu-progress", daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        """Refresh the live line until close(); a display that fails stops the ticker, never the run."""
        while not self._stop.wait(self.tick_s):
            try:
                if self._status is not None:
                    self._status.update(self.status_line())
            except Exception:
                return

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=max(2 * self.tick_s, 1.0))
        if self._status is not None:
            self._status.stop()
            self._status = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
