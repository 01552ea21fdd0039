"""torch.distributed's env:// variables for tasks a plain `srun` started: from Slurm's own step variables, the same
on every task without talking, a different port for two steps of one job."""

from __future__ import annotations

import os
import shutil
import stat

from xmfu.harness.machine.ranks import slurm_rendezvous

STEP = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "3", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
        "SLURM_STEP_NODELIST": "n[2-3]", "SLURM_JOB_NODELIST": "n[1-4]"}


def test_outside_slurm_nothing_is_derived():
    assert slurm_rendezvous({}) == {} and slurm_rendezvous({"SLURM_JOB_ID": "42"}) == {}


def test_the_master_is_the_steps_first_host_as_scontrol_expands_it(tmp_path, monkeypatch):
    scontrol = tmp_path / "scontrol"
    scontrol.write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames n[2-3]" ] && printf "n2\\nn3\\n"\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    out = slurm_rendezvous(STEP)
    assert out["MASTER_ADDR"] == "n2" and (out["RANK"], out["WORLD_SIZE"], out["LOCAL_RANK"]) == ("1", "2", "0")
    assert 20000 <= int(out["MASTER_PORT"]) <= 60000
    assert slurm_rendezvous(STEP) == out  # every task of the step computes the same
    assert slurm_rendezvous({**STEP, "SLURM_STEP_ID": "4"})["MASTER_PORT"] != out["MASTER_PORT"]


def test_without_scontrol_a_plain_first_host_is_read(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert shutil.which("scontrol") is None
    assert slurm_rendezvous({**STEP, "SLURM_STEP_NODELIST": "alpha,beta"})["MASTER_ADDR"] == "alpha"
