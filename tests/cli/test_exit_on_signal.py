"""The process's way out: an interrupt exits 130 whichever signal it was (SIGTERM included, never 143), also when it
lands outside the run's handlers, and an interrupted process leaves through os._exit, skipping the interpreter's
shutdown (issue 26 item 3: with torch and JAX loaded, that shutdown crashed after a SIGTERM, exit 139)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


def _entry(body: str) -> subprocess.CompletedProcess:
    """`xmfu` as its console script starts it (run_as_module), with `main` or a command replaced by `body`."""
    code = textwrap.dedent("""
        import atexit, os, signal, sys, time
        from xmfu.harness.cli import main as cli
        atexit.register(lambda: print("interpreter shutdown", file=sys.stderr, flush=True))
        def kill(signum):
            os.kill(os.getpid(), signum)
            time.sleep(0.1)  # the handler runs here
    """) + textwrap.dedent(body) + "\nsys.argv = ['xmfu', 'peaks']\ncli.run_as_module()\n"
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
                          check=False)


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_signal_after_main_has_put_its_handlers_back_does_not_kill_the_process(signum):
    # the window between the end of the command and the process's exit: the default SIGTERM action ends it as 143
    done = _entry(f"""
        real_main = cli.main
        def main():
            status = real_main()
            kill(signal.{signum})
            return 130
        cli.main = main
    """)
    assert done.returncode == 130, done.stderr[-2000:]


def test_sigterm_during_start_up_exits_130():
    done = _entry("""
        def dispatch(args):
            kill(signal.SIGTERM)
            return 0
        cli._dispatch = dispatch
    """)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.strip().endswith("xmfu: interrupted") and "Traceback" not in done.stderr


def test_an_interrupted_process_skips_the_interpreter_shutdown_and_a_finished_one_does_not():
    interrupted = _entry("cli.main = lambda: (print('bundle: x', flush=False), 130)[1]")
    assert interrupted.returncode == 130 and "interpreter shutdown" not in interrupted.stderr
    assert interrupted.stdout == "bundle: x\n"  # what it printed is flushed first
    finished = _entry("cli.main = lambda: 0")
    assert finished.returncode == 0 and "interpreter shutdown" in finished.stderr
