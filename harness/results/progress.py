"""What a long sweep shows while it runs: case i of N, the backend just measured, elapsed time, an ETA and
the latest figure; a live line (rich) on a terminal, plain lines where the output is a log (CI), nothing on
ranks other than 0 (rank 0 speaks for the group)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from xmfu.harness.results.table import progress_line


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else (
        f"{seconds // 60}:{seconds % 60:02d}")


class Progress:
    """Counts finished cases (a case's rows arrive together) and says where the sweep stands."""

    def __init__(self, total_cases: int, stream: TextIO | None = None, live: bool | None = None,
                 enabled: bool = True) -> None:
        self.total, self.stream, self.enabled = max(total_cases, 1), stream or sys.stderr, enabled
        self.live = self.stream.isatty() if live is None else live
        self.start = time.monotonic()
        self.cases: list[str] = []
        self._console: Any = None
        self._status: Any = None

    def __call__(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        key = f"{row.get('phase')}/{row['case_id']}"
        if key not in self.cases:
            self.cases.append(key)
        line = f"[{self.position()}] {progress_line(row)}"
        if self.live:
            self._live(line)
        else:
            print(line, file=self.stream, flush=True)

    def position(self) -> str:
        """"case 3/40, 0:42 elapsed, ETA 8:45" from the cases finished so far (a case in progress counts)."""
        done = len(self.cases)
        elapsed = time.monotonic() - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        return f"case {done}/{self.total}, {_clock(elapsed)} elapsed, ETA {_clock(eta)}"

    def _live(self, line: str) -> None:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False)
            self._status = self._console.status("")
            self._status.start()
        self._console.print(line, markup=False, soft_wrap=True)
        self._status.update(f"xmfu: {self.position()}")

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
