"""Signals as KeyboardInterrupt: held while a row is written, and a start-up interrupt that was swallowed."""

from __future__ import annotations

import os
import signal
import time

import pytest

from xmfu.harness.engine.interrupts import (
    interrupts_as_keyboard_interrupt,
    raise_if_interrupted,
    remember_start_up_interrupt,
    shielded,
)


def test_a_remembered_start_up_interrupt_stops_the_run_before_its_first_case_once():
    before = signal.getsignal(signal.SIGINT)
    ran = []
    remember_start_up_interrupt(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="before the run started"), interrupts_as_keyboard_interrupt():
        ran.append("first")
    assert ran == [] and signal.getsignal(signal.SIGINT) is before  # the run's handlers are put back
    with interrupts_as_keyboard_interrupt():  # used up: the next run is not interrupted
        ran.append("second")
    assert ran == ["second"]


def test_a_forgotten_start_up_interrupt_does_not_stop_the_run():
    remember_start_up_interrupt(signal.SIGINT)
    remember_start_up_interrupt(None)
    with interrupts_as_keyboard_interrupt():
        ran = True
    assert ran


def test_a_signal_during_a_write_waits_for_the_write():
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_as_keyboard_interrupt():
        with shielded():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here, and holds the signal
            done.append("row written")
        done.append("after the write")  # not reached: the held signal is raised as the shield ends
    assert done == ["row written"]
    raise_if_interrupted()  # the run is over: its signal is forgotten (a later runner outside a run must not raise)
