"""Signals at start-up (issue 42 item 16): a Ctrl-C (or two) during the console script's imports, and a SIGTERM
while Hydra's own code runs between the command and the job, end as an interrupted run: 130, no traceback, no
Hydra error line. Each lands in a chosen place, deterministically: the process signals itself from there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle

CHECKOUT = Path(__file__).resolve().parents[2]
RUN = ["run", "backends=[torch]", "workload.sizes=[16]", "timing=quick", "timing.max_time_s=0.2",
       "timing.warmup_s=0", "telemetry.enabled=false"]


def _sigint_as_from_a_terminal() -> None:
    """A Ctrl-C's SIGINT at its default, as from a terminal: a job a non-interactive shell starts in the background
    (`cmd &`, nohup; a CI runner may) inherits it ignored, and then neither Python nor xmfu installs a handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_two_ctrl_cs_during_the_console_scripts_imports_exit_130_without_a_traceback(tmp_path):
    """The console script (pip's generated file, named `xmfu`) imports harness/cli/main.py before anything else;
    here two SIGINTs land inside the first of that module's own imports (a second of imports on a loaded machine)."""
    script = tmp_path / "xmfu"
    script.write_text(textwrap.dedent("""
        import importlib.abc, os, re, signal, sys, time

        class Interrupt(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "xmfu.harness.cli.archive":
                    sys.meta_path.remove(self)
                    for _ in range(2):
                        os.kill(os.getpid(), signal.SIGINT)
                        time.sleep(0.2)
                return None

        sys.meta_path.insert(0, Interrupt())
        from xmfu.harness.cli.main import run_as_module
        if __name__ == '__main__':
            sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
            sys.exit(run_as_module())
    """))
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT)}
    done = subprocess.run([sys.executable, str(script), "peaks"], capture_output=True, text=True, env=env,
                          timeout=120, check=False, preexec_fn=_sigint_as_from_a_terminal)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr[-3000:]


def _signal_self(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.5)  # the handler runs here


def test_sigterm_inside_hydras_launch_is_an_interrupted_run_not_a_hydra_error(monkeypatch, tmp_path, cli):
    """Hydra's launch catches any Exception and exits 1 with its error line (hydra/_internal/utils.py
    run_and_report); a KeyboardInterrupt that its code (or a library under it) turns into one of its own errors
    once ended a run so. Here the SIGTERM lands in Hydra's code, which turns the KeyboardInterrupt into a
    RuntimeError if it sees one; the run must start interrupted, keep a valid partial bundle and exit 130."""
    from hydra._internal.hydra import Hydra

    real = Hydra.run

    def run(self, *args, **kwargs):
        try:
            _signal_self(signal.SIGTERM)
        except KeyboardInterrupt:
            raise RuntimeError("Error composing the job") from None
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Hydra, "run", run)
    proc = cli(*RUN, f"results_dir={tmp_path}")
    assert proc.returncode == 130, proc.stderr
    assert "Error composing" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr, proc.stderr
    folder = Path(proc.stdout.strip().splitlines()[-1].removeprefix("bundle: "))
    assert validate_bundle(folder) == [] and read_bundle(folder).manifest["status"] == "partial"


def test_a_signal_no_job_took_is_raised_when_hydra_returns(monkeypatch, cli):
    """`--cfg job` runs no job: an interrupt recorded during Hydra's launch still ends the command as interrupted."""
    from hydra._internal.hydra import Hydra

    real = Hydra.show_cfg

    def show_cfg(self, *args, **kwargs):
        _signal_self(signal.SIGINT)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Hydra, "show_cfg", show_cfg)
    proc = cli("run", "--cfg", "job")
    assert proc.returncode == 130 and "interrupted" in proc.stderr, proc.stderr


def test_a_library_that_exits_on_its_own_after_a_ctrl_c_still_exits_130(monkeypatch, capsys):
    """A library that catches the KeyboardInterrupt, prints its own error and calls sys.exit(1), as Hydra's
    run_and_report does, before the command's handlers hold signals."""
    import xmfu.harness.config.hydra_app
    from xmfu.harness.cli.main import main

    def composition_that_exits(args, registry):
        try:
            _signal_self(signal.SIGTERM)
        except KeyboardInterrupt:
            sys.exit(1)
        pytest.fail("the signal never came")

    monkeypatch.setattr(xmfu.harness.config.hydra_app, "run_command", composition_that_exits)
    assert main(["run", "workload=matmul"]) == 130
    assert "interrupted" in capsys.readouterr().err
