"""Plug-ins that cannot cheat (issue 41 section 4): three cheating plug-ins (tests/engine/cheats.py), each checked
correct before timing, are each caught: a time under the roofline's floor fails the row as `invalid: faster than the
roofline` (harness/machine/roofline.py), and under timing.fresh_inputs=true the last timed output, re-checked
against the last new inputs, makes it `incorrect` (engine/fresh.py, engine/recheck.py). The honest backend beside
them stays ok, and every bundle validates (xmfu validate finds the failed rows' samples under the same floor)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import refused_here
from xmfu.harness.machine.roofline import INVALID

CHEATS = "tests.engine.cheats"
# 192^3 fp32: ~14 MFLOP, tens of microseconds at a CPU's estimated peak, a millisecond or less honestly on two cores
RUN = ["workload=matmul", "workload.sizes=[192]", "dtype=fp32", "timing=quick", "timing.max_time_s=0.5",
       "timing.warmup_s=0", "timing.max_samples=20", "telemetry.enabled=false"]


def _rows(bundle: Path) -> dict[str, dict]:
    return {r["backend"].rpartition(":")[2]: r for r in map(json.loads, (bundle / "cases.jsonl").read_text()
                                                             .splitlines())}


@pytest.mark.slow(seconds=6)
def test_a_cached_and_a_deferred_output_are_faster_than_the_roofline(cli, tmp_path):
    done = cli("run", *RUN, f"backends=[torch,{CHEATS}:CachedOutput,{CHEATS}:DeferredOutput]",
               f"results_dir={tmp_path}", "run_id=floor")
    assert done.returncode in (0, 3), done.stderr
    rows = _rows(tmp_path / "floor")
    for cheat in ("CachedOutput", "DeferredOutput"):
        row = rows[cheat]
        assert row["correctness"]["ok"] is True  # right when checked before timing
        assert row["status"] == "failed" and row["reason"].startswith(INVALID), row["reason"]
        assert row["time_s"] is None and row["tflops"] is None
    assert rows["torch"]["status"] == "ok" and rows["torch"]["timed_check"]["ok"] is True
    assert cli("validate", str(tmp_path / "floor")).returncode == 0


@pytest.mark.slow(seconds=6)
def test_fresh_inputs_catch_the_cached_and_the_deferred_output_in_the_timed_calls_own_output(cli, tmp_path):
    done = cli("run", *RUN, "timing.fresh_inputs=true",
               f"backends=[torch,jax,{CHEATS}:CachedOutput,{CHEATS}:DeferredOutput]", f"results_dir={tmp_path}",
               "run_id=fresh")
    assert done.returncode in (0, 3), done.stderr
    rows = _rows(tmp_path / "fresh")
    for cheat in ("CachedOutput", "DeferredOutput"):
        row, check = rows[cheat], rows[cheat]["timed_check"]
        assert row["correctness"]["ok"] is True and row["status"] == "incorrect", row["reason"]
        assert "re-checked after the timed loop" in row["reason"] and check["ok"] is False
        assert check["inputs"].startswith("timing.fresh_inputs' last (seed ")
    if why := refused_here("jax"):  # a stack without JAX: its row says so, and the rest is checked as everywhere
        assert rows["jax"]["status"] == "skipped" and rows["jax"]["reason"] == why, rows["jax"]
    else:
        assert rows["jax"]["status"] == "ok" and rows["jax"]["timed_check"]["ok"] is True
    honest = rows["torch"]
    assert honest["status"] == "ok" and honest["timed_check"]["ok"] is True
    assert honest["timer"]["fresh_inputs_calls"] >= honest["time_s"]["n"] and honest["timer"]["fresh_inputs_s"] > 0
    assert honest["comparability"]["protocol"]["fresh_inputs"] is True  # never compared with reused inputs
    assert cli("validate", str(tmp_path / "fresh")).returncode == 0


@pytest.mark.slow(seconds=6)
def test_a_replaced_timer_reads_faster_than_the_roofline(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(time, "perf_counter", time.perf_counter)  # the cheat replaces it: put back afterwards
    # timing.max_inner: the slowed clock would size each sample at timing.max_inner real calls
    done = cli("run", *RUN, "timing.max_inner=4", f"backends=[{CHEATS}:ReplacedTimer]", f"results_dir={tmp_path}",
               "run_id=timer")
    assert done.returncode == 1, done.stderr  # its one row failed: the run measured nothing
    row = _rows(tmp_path / "timer")["ReplacedTimer"]
    assert row["correctness"]["ok"] is True and row["status"] == "failed" and row["reason"].startswith(INVALID)
    monkeypatch.undo()
    assert cli("validate", str(tmp_path / "timer")).returncode == 0
