"""Ctrl-C and SIGTERM as KeyboardInterrupt, but never in the middle of writing a row.

A signal that arrives while a bundle is being appended to is held until the write is complete, so an
interrupted run's files always agree with each other and with their checksums.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_state: dict[str, Any] = {"shielded": 0, "pending": None, "requested": None}


def remember_start_up_interrupt(signum: int | None) -> None:
    """Record a signal that came before a run installed its handler (the command's start-up handler calls this),
    or forget it (None). The KeyboardInterrupt raised then can be swallowed on its way out (it may land in a gc
    callback or a library's broad except); the run then starts interrupted instead of running every case."""
    _state["requested"] = signum


def _handler(signum: int, frame: Any) -> None:
    _state["requested"] = signum
    if _state["shielded"]:
        _state["pending"] = signum
        return
    raise KeyboardInterrupt(f"signal {signum}")


def raise_if_interrupted() -> None:
    """Re-raise a signal whose KeyboardInterrupt was swallowed (e.g. it landed in a gc callback)."""
    if _state["requested"] is not None:
        raise KeyboardInterrupt(f"signal {_state['requested']}")


@contextmanager
def interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM (Slurm, timeouts) raise KeyboardInterrupt inside this block.

    SIGINT is installed explicitly: a parent non-interactive shell may have left it ignored.
    """
    sigs = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, _handler) for s in sigs}
    try:
        if _state["requested"] is not None:  # remembered at start-up (remember_start_up_interrupt)
            raise KeyboardInterrupt(f"signal {_state['requested']} (before the run started)")
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _state["requested"] = None  # the run is over: a later raise_if_interrupted() outside a run must not fire


@contextmanager
def shielded() -> Iterator[None]:
    """Hold signals until the block has finished; then act on the last one that came."""
    _state["shielded"] += 1
    try:
        yield
    finally:
        _state["shielded"] -= 1
        pending, _state["pending"] = _state["pending"], None
        if pending is not None and not _state["shielded"]:
            raise KeyboardInterrupt(f"signal {pending}")
