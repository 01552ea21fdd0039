"""Signals as KeyboardInterrupt: held while a row is written, and a start-up interrupt that was swallowed."""

from __future__ import annotations

import os
import signal
import time

import pytest

from xmfu.harness.engine.interrupts import (
    hold_signals,
    interrupts_as_keyboard_interrupt,
    raise_if_interrupted,
    remember_start_up_interrupt,
    shielded,
    signal_received,
)


def test_a_remembered_start_up_interrupt_stops_the_run_before_its_first_case_once():
    before = signal.getsignal(signal.SIGINT)
    ran = []
    remember_start_up_interrupt(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="signal 2"), interrupts_as_keyboard_interrupt():
        raise_if_interrupted()  # the run's first step (run.py)
        ran.append("first")
    assert ran == [] and signal.getsignal(signal.SIGINT) is before  # the run's handlers are put back
    with interrupts_as_keyboard_interrupt():  # used up: the next run is not interrupted
        raise_if_interrupted()
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


def _signal(signum=signal.SIGINT):
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs here


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_after_the_first_interrupt_further_signals_are_held_while_the_bundle_is_finished(second):
    # issue 26: a second Ctrl-C (or one sent to the process group) landed between the manifest and SHA256SUMS
    finished = []
    with interrupts_as_keyboard_interrupt():
        try:
            _signal()
        except KeyboardInterrupt:
            finished.append("stopped")
        finally:
            hold_signals()  # as run.py does once its phases end
        _signal(second)  # while finishing: recorded, not raised
        with shielded():
            _signal(second)
        finished.append("finished")
        assert signal_received() == second
    assert finished == ["stopped", "finished"]
    assert signal_received() is None  # the run is over


def test_held_signals_let_a_finishing_run_end_and_are_reported():
    with interrupts_as_keyboard_interrupt():
        hold_signals()
        _signal(signal.SIGTERM)
        raise_if_interrupted()  # not even this raises while finishing
        assert signal_received() == signal.SIGTERM


def test_a_signal_held_by_nested_shields_is_raised_when_the_outermost_ends():
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts_as_keyboard_interrupt():
        with shielded():
            with shielded():
                _signal()
            done.append("inner over")  # the signal is still held here
        done.append("not reached")
    assert done == ["inner over"]


def test_an_interrupt_swallowed_in_a_gc_callback_is_raised_at_the_next_check_and_not_reported(capsys):
    # JAX's _xla_gc_callback: Python reports an exception raised in a gc callback ("Exception ignored in") and goes on
    import gc

    def callback(phase, info):
        if phase == "start":
            gc.callbacks.remove(callback)
            _signal()

    with pytest.raises(KeyboardInterrupt), interrupts_as_keyboard_interrupt():
        gc.callbacks.append(callback)
        gc.collect()  # the KeyboardInterrupt is raised inside the callback, and swallowed there
        reached = True
        raise_if_interrupted()  # the run's check after each case
    assert reached
    assert "Exception ignored" not in capsys.readouterr().err
