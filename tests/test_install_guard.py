"""scripts/install.sh with its venv active, and --help (issue 42 item 12): with .venv active, python3 is the venv's
own interpreter, and the install planned a venv made from it over itself; `--help` was an unknown argument (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "install.sh"


def test_help_prints_the_usage_and_exits_0():
    for flag in ("--help", "-h"):
        proc = subprocess.run(["bash", str(SCRIPT), flag], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stderr == ""
        assert proc.stdout.startswith("Install xmfu into a virtual environment")
        assert "usage: scripts/install.sh [--editable]" in proc.stdout and "XMFU_PLATFORM" in proc.stdout


def test_an_active_venv_is_made_again_from_the_interpreter_it_came_from(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    own = venv / "bin" / "python"
    # the interpreter the venv was made from (sys._base_executable is the venv's own python on Python 3.10)
    base = str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")
    if sys.version_info >= (3, 11):
        base = subprocess.run([str(own), "-c", "import sys; print(sys._base_executable)"], capture_output=True,
                              text=True, check=True).stdout.strip()
    env = {**os.environ, "XMFU_PLATFORM": "cpu", "PYTHON": str(own), "VENV": str(venv), "VIRTUAL_ENV": str(venv)}
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{venv} is the active venv" in proc.stderr  # a note, not part of the plan
    assert f"+ {base} -m venv --system-site-packages {venv}" in proc.stdout.splitlines()
    assert f"+ {own} -m venv" not in proc.stdout
