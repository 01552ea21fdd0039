"""scripts/compat.sh against a stand-in interpreter (issue 42 item 7): the `dev` profile never installed its
frameworks (pin() kept constraints.txt's `# needs ...` comments: pip's `ERROR: Invalid requirement: '#'`) and every
profile exited 0 whatever its line said. The stand-in Python makes venvs, answers pip, pytest and torchrun as told,
and its `xmfu` writes a bundle whose manifest counts what it is told; the real script runs against it, in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "compat.sh"

PYTHON = """#!/usr/bin/env bash
# a stand-in interpreter: venv, pip, pytest and torchrun as the test says; anything else by the real Python
echo "$*" >>"$FAKE_LOG"
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && cp "$FAKE_XMFU" "$3/bin/xmfu"; exit 0 ;;
  "-m pip")
    for arg in "$@"; do [[ "$arg" == "#"* ]] && { echo "ERROR: Invalid requirement: '#'" >&2; exit 1; }; done
    [ "$3" = install ] && [ -n "${FAKE_PIP_FAIL:-}" ] && { echo "ERROR: no matching distribution" >&2; exit 1; }
    exit 0 ;;
  "-m pytest")
    if [ "${FAKE_PYTEST_RC:-0}" = 0 ]; then echo "==== 7 passed in 1.0s ===="
    else echo "== 2 failed, 5 passed in 1.0s =="; fi
    exit "${FAKE_PYTEST_RC:-0}" ;;
  "-m torch.distributed.run") shift 2; while [[ "$1" == --* ]]; do shift; done; exec "$@" ;;
esac
exec "$REAL_PYTHON" "$@"
"""

XMFU = """#!/usr/bin/env bash
# a stand-in `xmfu run`: a bundle whose manifest counts one ok row, or one failed row for FAKE_FAIL_WORKLOAD
for arg in "$@"; do
  case "$arg" in results_dir=*) out=${arg#results_dir=} ;; workload=*) w=${arg#workload=} ;; esac
done
mkdir -p "$out/b"
if [ "$w" = "${FAKE_FAIL_WORKLOAD:-}" ]; then
  echo '{"counts": {"ok": 1, "failed": 1}}' >"$out/b/manifest.json"; exit 1
fi
echo '{"counts": {"ok": 2}}' >"$out/b/manifest.json"
"""


def _compat(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, str]:
    pyenv = tmp_path / "pyenv" / "versions" / "3.11.7" / "bin"
    pyenv.mkdir(parents=True, exist_ok=True)
    for path, text in ((pyenv / "python", PYTHON), (tmp_path / "xmfu-stand-in", XMFU)):
        path.write_text(text)
        path.chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    full_env = {**os.environ, "PYENV_ROOT": str(tmp_path / "pyenv"), "XMFU_COMPAT_DIR": str(tmp_path / "compat"),
                "FAKE_LOG": str(log), "FAKE_XMFU": str(tmp_path / "xmfu-stand-in"), "REAL_PYTHON": sys.executable,
                **env}
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=full_env, timeout=300)
    return proc, log.read_text()


def test_dev_installs_constraints_pins_without_their_comments_and_passes(tmp_path):
    proc, calls = _compat(tmp_path, "dev")
    assert proc.returncode == 0, proc.stderr
    pins = next(line for line in calls.splitlines() if line.startswith("-m pip install -c") and "torch==" in line)
    assert "torch==2.13.0 triton==3.9.0 jax==0.10.2 jaxlib==0.10.2 numpy==2.4.6" in pins and "#" not in pins
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("| dev | ") and "| 7 passed |" in line and line.count(" ok (2 ok)") == 5


@pytest.mark.parametrize(("option", "env", "says"), [
    ("--install-only", {"FAKE_PIP_FAIL": "1"}, "| dev | install failed"),
    ("--no-smoke", {"FAKE_PYTEST_RC": "1"}, "| FAIL (pytest exit 1): 2 failed, 5 passed | not run |"),
    ("--no-tests", {"FAKE_FAIL_WORKLOAD": "inference"}, "inference FAIL (exit 1) (1 failed, 1 ok)"),
])
def test_a_failed_install_suite_or_smoke_run_exits_1(tmp_path, option, env, says):
    proc, _ = _compat(tmp_path, "dev", option, **env)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert says in proc.stdout


def test_help_exits_0_with_the_usage_and_a_bad_argument_exits_2(tmp_path):
    for args in (["--help"], ["-h"], ["dev", "--help"]):
        proc, calls = _compat(tmp_path, *args)
        assert proc.returncode == 0 and proc.stdout.startswith("Build a venv for one named framework stack")
        assert "usage: scripts/compat.sh PROFILE" in proc.stdout and "exit status:" in proc.stdout and calls == ""
    proc, _ = _compat(tmp_path, "dev", "--tests")
    assert proc.returncode == 2 and "unknown option '--tests'" in proc.stderr
