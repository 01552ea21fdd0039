"""Ctrl-C and SIGTERM as KeyboardInterrupt, but never in the middle of writing a row, and never twice.

A signal that arrives while a bundle is being appended to is held until the write is complete, so an
interrupted run's files always agree with each other and with their checksums.

Once the run has stopped (interrupted or not), it finishes its bundle (the last counts, the manifest's status,
SHA256SUMS) holding every further signal: recorded, never raised (`hold_signals`, `signal_received`). A second
Ctrl-C, or one that a shell or `timeout` delivers to the whole process group, once landed between the manifest and
its checksum and left `manifest.json: checksum mismatch` (issue 26). Until the run holds signals, a second one still
raises (the first may have been swallowed), but never inside a shielded write.

A KeyboardInterrupt raised in a gc callback (JAX registers one, `_xla_gc_callback`) cannot propagate: Python
reports it as "Exception ignored in" with a traceback and goes on. The run re-raises it at the end of the case
(`raise_if_interrupted`), so during a run that report is left out (`_unraisable`).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_state: dict[str, Any] = {"shielded": 0, "pending": None, "requested": None, "holding": False,
                         "unraisablehook": sys.unraisablehook}


def remember_start_up_interrupt(signum: int | None) -> None:
    """Record a signal that came before a run installed its handler (the command's start-up handler calls this),
    or forget it (None). The KeyboardInterrupt raised then can be swallowed on its way out (it may land in a gc
    callback or a library's broad except); the run then starts interrupted instead of running every case."""
    _state["requested"] = signum


def _interrupt(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt(f"signal {signum}")


def _handler(signum: int, frame: Any) -> None:
    _state["requested"] = signum
    if _state["holding"]:  # the run is finishing its bundle: nothing may cut that short
        return
    if _state["shielded"]:
        _state["pending"] = signum
        return
    raise _interrupt(signum)


def _unraisable(unraisable: Any) -> None:
    """sys.unraisablehook during a run: our own KeyboardInterrupt, swallowed where it landed (a gc callback), is
    re-raised by raise_if_interrupted, not reported; anything else goes to the hook that was there."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _state["requested"] is not None:
        return
    _state["unraisablehook"](unraisable)


def raise_if_interrupted() -> None:
    """Re-raise a signal whose KeyboardInterrupt was swallowed (e.g. it landed in a gc callback), or one remembered
    from start-up; nothing once the run holds signals (it is finishing)."""
    if _state["requested"] is not None and not _state["holding"]:
        raise _interrupt(_state["requested"])


def hold_signals() -> None:
    """From now until the run's handlers are removed, a signal is recorded and never raised: what follows (finishing
    the bundle) runs to its end."""
    _state["holding"] = True


def signal_received() -> int | None:
    """The last signal the run received (None: none), including those held while it finished."""
    return _state["requested"]


@contextmanager
def interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """SIGINT and SIGTERM (Slurm, timeouts) raise KeyboardInterrupt inside this block.

    SIGINT is installed explicitly: a parent non-interactive shell may have left it ignored. A signal remembered at
    start-up (remember_start_up_interrupt) is raised by the block's first `raise_if_interrupted()`.
    """
    sigs = (signal.SIGINT, signal.SIGTERM)
    _state.update(holding=False, pending=None, unraisablehook=sys.unraisablehook)
    previous = {s: signal.signal(s, _handler) for s in sigs}
    sys.unraisablehook = _unraisable
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sys.unraisablehook = _state["unraisablehook"]
        # the run is over: a later raise_if_interrupted() outside a run must not fire
        _state.update(requested=None, holding=False, pending=None)


def _record(signum: int, frame: Any) -> None:
    _state["requested"] = signum


@contextmanager
def recorded() -> Iterator[None]:
    """SIGINT and SIGTERM recorded, never raised, inside this block: around a library's own machinery that would
    turn a KeyboardInterrupt into an error of its own (Hydra's launch catches any Exception and exits 1 with its
    error line: a SIGTERM 1.6 s into a run once ended so, not as interrupted). A run started inside the block
    starts interrupted (its handler replaces this one and raise_if_interrupted raises what was recorded); one that
    no run took is raised as KeyboardInterrupt when the block ends, also where the library exited on its own."""
    if threading.current_thread() is not threading.main_thread():  # handlers belong to the main thread
        yield
        return
    previous = {s: signal.signal(s, _record) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except SystemExit:  # the library gave up (exit 1 after its error line): an interrupt it swallowed explains it
        if _state["requested"] is None:
            raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if _state["requested"] is not None:
        raise _interrupt(_state["requested"])


@contextmanager
def shielded() -> Iterator[None]:
    """Hold signals until the block has finished; then act on the last one that came (unless the run is already
    finishing). Nested shields act once, at the outermost one's end."""
    _state["shielded"] += 1
    try:
        yield
    finally:
        _state["shielded"] -= 1
        if not _state["shielded"]:
            pending, _state["pending"] = _state["pending"], None
            if pending is not None and not _state["holding"]:
                raise _interrupt(pending)
