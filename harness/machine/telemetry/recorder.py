"""Sampling between start() and stop(): a background thread at a fixed rate where the sampler allows it,
otherwise one reading at each end of the window.

A CPU run gets no sampling thread: on a small machine it would take a core from the measured OpenMP threads,
whose barriers then wait for the descheduled one. Energy counters and clocks read at both ends still give
the window's energy and mean power."""

from __future__ import annotations

import threading

from xmfu.harness.machine.telemetry.base import Reading, Sampler


class Recorder:
    def __init__(self, sampler: Sampler, rate_hz: float) -> None:
        self.sampler, self.period = sampler, 1.0 / rate_hz
        self.readings: list[Reading] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while True:
            self._read()
            if self._stop.wait(self.period):
                break
        self._read()  # one reading after the window closes, so the last interval is covered

    def _read(self) -> None:
        try:
            self.readings.append(self.sampler.read())
        except Exception as exc:  # a failed query is a gap, never a crash of the run
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def start(self) -> None:
        if not self.sampler.available:
            return
        if getattr(self.sampler, "background", True):
            self._thread = threading.Thread(target=self._loop, name="xmfu-telemetry", daemon=True)
            self._thread.start()
        else:
            self._read()

    def stop(self) -> list[Reading]:
        if self._thread:
            self._stop.set()
            self._thread.join(timeout=10)
        elif self.sampler.available:
            self._read()
        return self.readings
