"""`xmfu fleet` on a real Slurm cluster of four nodes on this host (scripts/slurm_local.sh; make test-slurm), as
issue 43 asks it proven: an untouched fleet passes; a node whose slurmd is CPU-throttled is named with a slow-*
reason and the run exits 1; a node whose slurmd dies mid-run could not run (never "failed") while every other
bundle stays valid, and `resume` completes the folder; a step past its time limit and a cancelled job are said as
such. Each fleet run takes minutes here (the four nodes share two cores)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import Cluster
from xmfu.harness.results.bundle.validator import load_bundle

pytestmark = pytest.mark.slurm
RUN_TIMEOUT_S = 1800  # one fleet run; minutes here, bounded generously for a loaded machine


def _xmfu(cluster: Cluster, *args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    return cluster.run(sys.executable, "-m", "xmfu", *args, timeout=timeout, check=False)


def _fleet(cluster: Cluster, folder: Path, *args: str) -> subprocess.CompletedProcess:
    return _xmfu(cluster, "fleet", "run", "--nodes", "4", "--level", "quick", "--results-dir", str(folder.parent),
                 "--id", folder.name, *args)


def _excluded(folder: Path) -> dict[str, list[str]]:
    return {e["host"]: e["reasons"] for e in json.loads((folder / "excluded.json").read_text())}


def _bundles_valid(folder: Path) -> list[str]:
    found = [p.parent for p in folder.rglob("manifest.json")]
    assert found
    return [f"{b}: {load_bundle(b).problems[:1]}" for b in found if load_bundle(b).problems]


def _fleet_in_background(cluster: Cluster, folder: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "xmfu", "fleet", "run", "--nodes", "4", "--level", "quick",
                             "--results-dir", str(folder.parent), "--id", folder.name, *args], env=cluster.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {seconds:g} s"
        time.sleep(1)


def test_an_untouched_fleet_passes(slurm_cluster: Cluster, tmp_path: Path):
    folder = tmp_path / "untouched"
    done = _fleet(slurm_cluster, folder)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _excluded(folder) == {} and "PASS" in done.stdout
    assert [e["host"] for e in json.loads((folder / "admitted.json").read_text())] == ["n1", "n2", "n3", "n4"]
    assert _bundles_valid(folder) == []


def test_a_throttled_node_is_named_a_killed_one_could_not_run_and_resume_completes(slurm_cluster: Cluster,
                                                                                  tmp_path: Path):
    folder = tmp_path / "faults"
    slurm_cluster.script("throttle", "n3", "10")  # a tenth of a core: slow beside three nodes sharing two cores
    try:
        run = _fleet_in_background(slurm_cluster, folder)
        _wait_for(folder / "nodes" / "n4", 600)  # n4's check has begun: its node dies under it
        slurm_cluster.script("kill", "n4")
        out, _ = run.communicate(timeout=RUN_TIMEOUT_S)
    except BaseException:
        slurm_cluster.script("revive", "n4", check=False)  # the other tests need four nodes
        raise
    finally:
        slurm_cluster.script("throttle", "n3", "off")
    revived = slurm_cluster.script("revive", "n4", check=False)  # before any assertion: the other tests need n4
    assert revived.returncode == 0, revived.stderr
    excluded = _excluded(folder)
    assert run.returncode == 1, out
    assert any(r.startswith("slow-") for r in excluded["n3"]), excluded
    assert excluded["n4"] == ["could-not-run"], excluded
    assert "failed" not in json.dumps(json.loads((folder / "excluded.json").read_text())[-1]["findings"])
    assert _bundles_valid(folder) == []
    resumed = _xmfu(slurm_cluster, "fleet", "resume", str(folder))
    assert "missing steps" in resumed.stdout, resumed.stdout + resumed.stderr
    assert "could-not-run" not in _excluded(folder).get("n4", []) and "n3" in _excluded(folder)
    assert _bundles_valid(folder) == []


def test_a_step_past_its_limit_and_a_cancelled_job_could_not_run(slurm_cluster: Cluster, tmp_path: Path):
    wrapper = tmp_path / "xmfu-hangs-on-n2"
    wrapper.write_text(f'#!/bin/sh\n[ "$(hostname)" = n2 ] && [ "$2" != workload=collectives ] && exec sleep 900\n'
                       f'exec {sys.executable} -m xmfu "$@"\n')
    wrapper.chmod(0o755)
    folder = tmp_path / "limit"
    done = _fleet(slurm_cluster, folder, "--step-limit", "3", "--xmfu-command", str(wrapper))
    excluded = _excluded(folder)
    assert excluded.get("n2") == ["could-not-run"], done.stdout
    # n2's own entry: on a loaded host another node may be excluded too (a collective's busbw below the fleet's)
    n2 = next(e for e in json.loads((folder / "excluded.json").read_text()) if e["host"] == "n2")
    assert any("time limit" in f["detail"] for f in n2["findings"]), n2

    cancelled = tmp_path / "cancelled"
    submitted = _fleet(slurm_cluster, cancelled, "--no-wait")
    job = json.loads((cancelled / "jobs.json").read_text())[0]["job_id"]
    _wait_for(cancelled / "nodes" / "n1", 600)
    slurm_cluster.run("scancel", job)
    report = _xmfu(slurm_cluster, "fleet", "report", str(cancelled), timeout=600)
    assert submitted.returncode == 0 and report.returncode == 3, report.stdout
    excluded = _excluded(cancelled)
    assert "could not run" in report.stdout and excluded and all(r == ["could-not-run"] for r in excluded.values())
