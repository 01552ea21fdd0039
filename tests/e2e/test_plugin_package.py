"""Issue 27's example plug-in (examples/my_attention) installed as a package: its entry point makes `my_attention` a
backend name, and its object is also reachable by import path; the attention smoke runs it beside torch_sdpa, its
rows are checked, carry the package and version, and the bundle validates where the package is not installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@pytest.mark.long  # the slow group (make test-slow): a package build and an interpreter run, 20 s or more
@pytest.mark.slow(seconds=25)
def test_the_example_package_runs_by_entry_point_and_by_import_path_beside_a_builtin(tmp_path):
    site, package = tmp_path / "site", tmp_path / "my_attention"
    # built from a copy: setuptools writes build/ and *.egg-info beside the sources, which must not be the checkout
    shutil.copytree(ROOT / "examples" / "my_attention", package, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(package)], check=True, timeout=300)
    env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "PYTHONPATH": str(site)}
    by_path = "my_attention.backend:MyAttention"
    run = subprocess.run([sys.executable, "-m", "xmfu", "run", "workload=attention", "experiment=smoke",
                          "workload.mode=[fwd]", f"backends=[torch_sdpa,my_attention,{by_path}]",
                          "baseline=torch_sdpa", "timing.max_time_s=0.3", "results_dir=r", "run_id=plug"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode in (0, 3), run.stdout + run.stderr
    rows = [json.loads(line) for line in (tmp_path / "r" / "plug" / "cases.jsonl").read_text().splitlines()]
    for name in ("my_attention", by_path):
        mine = [r for r in rows if r["backend"] == name]
        assert len(mine) == 2 and all(r["status"] == "ok" and r["correctness"]["ok"] for r in mine), mine
        assert mine[0]["plugin"]["package"] == "my-attention" and mine[0]["plugin"]["version"] == "0.1.0"
        assert mine[0]["comparability"]["plugin"]["version"] == "0.1.0"
        assert mine[0]["timing_valid"] is False  # Triton's interpreter on a CPU: checked, not timed
    assert next(r for r in rows if r["backend"] == "my_attention")["plugin"]["entry_point"] == "my_attention"
    helped = subprocess.run([sys.executable, "-m", "xmfu", "run", "--help"], env=env, capture_output=True,
                            text=True, timeout=120, cwd=tmp_path)
    assert "my_attention (my-attention 0.1.0: my_attention.backend:MyAttention)" in helped.stdout
    plain = {k: v for k, v in env.items() if k != "PYTHONPATH"}  # the package is not installed where it is read
    valid = subprocess.run([sys.executable, "-m", "xmfu", "validate", "r/plug"], env=plain, capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
    assert valid.returncode == 0, valid.stdout + valid.stderr
