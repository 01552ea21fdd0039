"""bin/xmfu: the checkout's command without activating the venv (issue 30, item 1). It runs the venv's xmfu from
any working folder, passing the arguments and the exit status through, and says what to do when nothing is
installed yet, instead of the shell's `command not found`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WRAPPER = ROOT / "bin" / "xmfu"


def _checkout(tmp_path: Path) -> Path:
    """A checkout's shape: bin/xmfu and, where given, .venv/bin/xmfu (here a stub that echoes its arguments)."""
    (tmp_path / "bin").mkdir()
    shutil.copy2(WRAPPER, tmp_path / "bin" / "xmfu")
    return tmp_path / "bin" / "xmfu"


def test_bin_xmfu_runs_the_venvs_xmfu_from_any_folder(tmp_path):
    wrapper = _checkout(tmp_path)
    stub = tmp_path / ".venv" / "bin" / "xmfu"
    stub.parent.mkdir(parents=True)
    stub.write_text('#!/bin/sh\necho "venv xmfu: $*"\nexit 3\n')
    stub.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "XMFU_VENV"}
    done = subprocess.run([str(wrapper), "run", "experiment=smoke", "a b"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.stdout == "venv xmfu: run experiment=smoke a b\n"
    assert done.returncode == 3  # the command's own status, for scripts


def test_bin_xmfu_without_an_install_says_make_install(tmp_path):
    wrapper = _checkout(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "XMFU_VENV"}
    done = subprocess.run([str(wrapper), "doctor"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert "make install" in done.stderr and str(tmp_path / ".venv") in done.stderr
    assert "Traceback" not in done.stderr
