"""torch's profiler wrote `USDT:... profiler_start` / `profiler_stop` to stderr twice per SDPA case (40 lines in an
attention smoke run, issue 42 item 12): xmfu sets kineto's log level before its first profile, unless the user set
one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = """
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_sdpa import _attend, _kernel_used
case = AttentionCase(1, 2, 2, 16, 16, 8, False, "top_left", 8 ** -0.5, "fp32", "fwd")
print(_kernel_used(_attend(case, "auto"), case, "cpu"))
"""


def test_the_sdpa_kernel_is_named_without_the_profilers_start_and_stop_lines():
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and proc.stdout.strip() != "unknown"
    assert "profiler_start" not in proc.stderr and "USDT" not in proc.stderr


def test_a_level_the_user_set_is_kept(monkeypatch):
    from xmfu.harness.machine.frameworks import quiet_torch_profiler

    monkeypatch.setenv("KINETO_LOG_LEVEL", "2")
    quiet_torch_profiler()
    assert os.environ["KINETO_LOG_LEVEL"] == "2"
    monkeypatch.delenv("KINETO_LOG_LEVEL")
    quiet_torch_profiler()
    assert os.environ["KINETO_LOG_LEVEL"] == "6"
