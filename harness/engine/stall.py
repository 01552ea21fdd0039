"""A watchdog for multi-process JAX cases: a case whose calls make no progress for the workload's `timeout_s` ends
the run, with its rows failed and the bundle partial, from a watching thread.

Why a thread: when a process of a jax.distributed run freezes or dies after joining, the others wait inside a
collective in XLA's C++ runtime (gloo on CPUs), which never returns to Python, so no exception or signal handler
of the main thread can run. JAX's own bound is its coordination service's heartbeat: when it passes, the client's
error callback ends the process with `LOG(FATAL) << "Terminating process because the JAX distributed service
detected fatal errors..."` (openxla/xla xla/pjrt/distributed/client.h; seen with jax 0.10.2 on CPU: SIGABRT, exit
134, for a frozen peer and, at the exit's shutdown barrier, for a dead one). xmfu sets that bound later than
timeout_s (machine/frameworks.py jax_join_options) and this watchdog acts at timeout_s.

Progress is a completed call: every warm-up call and sample, the first call and the check of a prepared backend,
a rank gather (`kick`). A single call longer than timeout_s (a compile included) counts as a frozen peer, as a
collective longer than timeout_s ends a torch run through its process group's timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class _Watch:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # held while the run is being ended: the main thread then writes nothing
        self.limit_s: float | None = None
        self.last = 0.0
        self.on_stall: Callable[[float], None] | None = None
        self.active: Callable[[], bool] = lambda: True
        self.thread: threading.Thread | None = None

    def loop(self) -> None:
        while True:
            limit = self.limit_s
            time.sleep(min(1.0, limit / 20) if limit else 0.2)
            with self.lock:
                if self.limit_s is None or self.on_stall is None:
                    continue
                if not self.active():  # not (yet) several processes: time spent joining is the join's to bound
                    self.last = time.monotonic()
                    continue
                idle = time.monotonic() - self.last
                if idle < self.limit_s:
                    continue
                self.limit_s = None
                self.on_stall(idle)  # ends the process (os._exit) while holding the lock


_WATCH = _Watch()


def kick() -> None:
    """A call completed: the case is making progress."""
    _WATCH.last = time.monotonic()


@contextmanager
def watched(limit_s: float | None, on_stall: Callable[[float], None],
            active: Callable[[], bool] = lambda: True) -> Iterator[None]:
    """Within the block, `on_stall(idle_seconds)` is called from the watching thread once no call has completed
    for `limit_s` seconds while `active()` holds (checked from that thread: it must be cheap and never block); it
    must end the process. None: not watched."""
    if limit_s is None:
        yield
        return
    w = _WATCH
    with w.lock:
        w.limit_s, w.on_stall, w.last, w.active = float(limit_s), on_stall, time.monotonic(), active
        if w.thread is None:
            w.thread = threading.Thread(target=w.loop, name="xmfu-stall-watch", daemon=True)
            w.thread.start()
    try:
        yield
    finally:
        with w.lock:  # blocks for good where the watchdog has fired: it is ending the process
            w.limit_s, w.on_stall = None, None
