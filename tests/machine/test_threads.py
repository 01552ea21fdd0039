"""CPU threads per framework (harness/machine/threads.py): OMP_WAIT_POLICY set before torch loads OpenMP, one
OpenMP thread per task of a multi-task launch (torchrun's rule), and what each row records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xmfu.harness.machine import threads

ROOT = Path(__file__).resolve().parents[2]

# In a child process: stop at the first `import torch` and report the OpenMP variables it would have seen.
_PROBE = """
import importlib.abc, json, os, sys
class Stop(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            names = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "XMFU_THREADS_SET")
            print(json.dumps({k: os.environ.get(k) for k in names}))
            sys.stdout.flush()
            os._exit(0)
sys.meta_path.insert(0, Stop())
sys.argv = ["xmfu", "env", "--json"]
"""
ENTRIES = {"python -m xmfu": "import runpy; runpy.run_module('xmfu', run_name='__main__', alter_sys=True)",
           "xmfu console script": "from xmfu.harness.cli.main import run_as_module; run_as_module()"}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_the_wait_policy_is_in_the_environment_before_torch_is_imported(entry):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", threads.SET_MARK)}
    env.update(PYTHONPATH=str(ROOT), SUBMITIT_LOCAL_NTASKS="2")  # as Hydra's submitit_local starts each of two tasks
    out = subprocess.run([sys.executable, "-c", _PROBE + ENTRIES[entry]], env=env, capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1",
                    "XMFU_THREADS_SET": "OMP_NUM_THREADS,OMP_WAIT_POLICY"}


def test_the_users_own_settings_win():
    env = {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "3", "SUBMITIT_LOCAL_NTASKS": "2"}
    assert threads.prepare_environment(env)["set"] == []
    assert env == {"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "3", "SUBMITIT_LOCAL_NTASKS": "2"}


@pytest.mark.parametrize(("launch", "threads_per_task"), [
    ({"SUBMITIT_LOCAL_NTASKS": "2"}, "1"),  # submitit_local: two tasks on this host, as torchrun would set
    ({"LOCAL_WORLD_SIZE": "4"}, "1"),
    ({"SLURM_NTASKS_PER_NODE": "2", "SLURM_CPUS_PER_TASK": "8"}, "8"),  # Slurm's own CPUs per task
    ({"SLURM_TASKS_PER_NODE": "2(x3)"}, "1"),
    ({"SUBMITIT_LOCAL_NTASKS": "1"}, None),  # one task keeps the framework's default
    ({}, None),
])
def test_each_task_of_a_multi_task_launch_gets_its_own_thread_count(launch, threads_per_task):
    env = dict(launch)
    threads.prepare_environment(env)
    assert env.get("OMP_NUM_THREADS") == threads_per_task and env["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_row_records_the_threads_and_who_set_them():
    import torch

    env = {"SUBMITIT_LOCAL_NTASKS": "2"}
    threads.prepare_environment(env)
    record = threads.threads_record("torch", env)
    assert record["intra_op_threads"] == torch.get_num_threads()
    assert record | {"intra_op_threads": 0} == record | {
        "framework": "torch", "intra_op_threads": 0, "intra_op_source": "torch.get_num_threads()",
        "omp_wait_policy": "PASSIVE", "omp_wait_policy_set_by": "xmfu", "omp_num_threads": "1",
        "set_by_xmfu": ["OMP_NUM_THREADS", "OMP_WAIT_POLICY"], "local_tasks": 2}
    jax = threads.threads_record("jax", {"OMP_WAIT_POLICY": "PASSIVE", "PJRT_NPROC": "3"})
    assert (jax["intra_op_threads"], jax["omp_wait_policy_set_by"]) == (3, "environment")
    assert jax["intra_op_source"].startswith("PJRT_NPROC")
    default = threads.threads_record("jax", {})
    assert default["intra_op_threads"] == len(os.sched_getaffinity(0)) and default["omp_wait_policy"] is None
