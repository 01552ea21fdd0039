"""How the host's threads are set for each framework on a CPU, so that torch's and XLA's thread pools do not fight.

The pathology (issue 30, item 8): torch's OpenMP threads busy-wait after each parallel region, and while they spin
JAX's threads (or another process's) wait for a core: on a 2-core host an fp32 128^3 torch matmul interleaved with
JAX took 6.65 ms instead of 0.21 ms, and the attention shoot-out printed JAX 134x faster than SDPA. xmfu therefore:

- sets OMP_WAIT_POLICY=PASSIVE unless the environment already names a policy. OpenMP reads it once, when its
  runtime loads (with torch), so `prepare_environment` runs first thing in `python -m xmfu`, the `xmfu` console
  script and the run session, before any framework is imported; child processes (Hydra's submitit tasks) inherit
  it. PASSIVE: waiting threads "do not consume processor cycles", ACTIVE: they "should mostly be active, consuming
  processor cycles, while waiting"; unset, libgomp spins for GOMP_SPINCOUNT (300,000 spins) before sleeping (GCC's
  libgomp manual, "OMP_WAIT_POLICY" and "GOMP_SPINCOUNT"; torch's Linux wheels bundle libgomp, torch/lib/libgomp.so.1
  in torch 2.13).
- gives each task of a multi-task launch one OpenMP thread, as torchrun does: torch 2.13 torch/distributed/run.py
  (line 872) sets OMP_NUM_THREADS=1 for its workers "if 'OMP_NUM_THREADS' not in os.environ and nproc_per_node > 1".
  Hydra's submitit_local launcher does not (submitit 1.5.4 submitit/local/local.py starts each task with a copy of
  the controller's environment and SUBMITIT_LOCAL_NTASKS), so two tasks on 2 cores each ran 2 threads (a 3.6 ms
  step took 664 ms). Under Slurm, SLURM_CPUS_PER_TASK is used where set, Slurm's own advice for OpenMP programs.
- records per row what was in force (`threads_record`): the framework's intra-op thread count and the wait policy,
  and who set them.

XLA's CPU client sizes its intra-op pool once, when JAX creates it: max(DefaultThreadPoolSize(), devices), where
DefaultThreadPoolSize() reads PJRT_NPROC, then NPROC, else tsl::port::MaxParallelism() (the schedulable CPUs)
(openxla xla/pjrt/cpu/cpu_client.cc GetPjRtCpuClient and xla/pjrt/utils.cc; the string PJRT_NPROC is in jaxlib
0.10.2's libjax_common.so; jax/_src/xla_bridge.py make_cpu_client passes no thread count). xmfu records that size
and leaves it to the environment: a one-thread XLA pool under multi-task JAX runs is not tested here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import Any

WAIT_POLICY = "PASSIVE"
SET_MARK = "XMFU_THREADS_SET"  # the variables xmfu set, comma-separated: inherited, so a child's rows say so too
_first: dict[str, Any] = {}  # what the first prepare_environment of this process found (OpenMP reads env once)


def local_tasks(env: MutableMapping[str, str]) -> int:
    """Processes of this launch on this host: torchrun's LOCAL_WORLD_SIZE, submitit_local's SUBMITIT_LOCAL_NTASKS
    (all on one node), Slurm's SLURM_NTASKS_PER_NODE or the first count of SLURM_TASKS_PER_NODE ("2(x3),1")."""
    for name in ("LOCAL_WORLD_SIZE", "SUBMITIT_LOCAL_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        text = env.get(name, "").split("(")[0].split(",")[0].strip()
        if text.isdigit():
            return max(int(text), 1)
    return 1


def _mark(env: MutableMapping[str, str], name: str, value: str) -> None:
    env[name] = value
    marked = [n for n in env.get(SET_MARK, "").split(",") if n]
    env[SET_MARK] = ",".join(sorted({*marked, name}))


def prepare_environment(env: MutableMapping[str, str] | None = None) -> dict[str, Any]:
    """Set the CPU thread variables that are not set yet (the user's own always win); returns what it did. Must run
    before torch loads OpenMP to take effect; whether it did is kept for the rows."""
    env = os.environ if env is None else env
    done: dict[str, Any] = {"set": [], "torch_loaded_before": "torch" in sys.modules}
    if "OMP_WAIT_POLICY" not in env:
        _mark(env, "OMP_WAIT_POLICY", WAIT_POLICY)
        done["set"].append("OMP_WAIT_POLICY")
    tasks = local_tasks(env)
    if tasks > 1 and "OMP_NUM_THREADS" not in env:
        per_task = env.get("SLURM_CPUS_PER_TASK", "").strip()
        _mark(env, "OMP_NUM_THREADS", per_task if per_task.isdigit() else "1")
        done["set"].append("OMP_NUM_THREADS")
        if done["torch_loaded_before"]:  # too late for the variable: tell the loaded runtime itself
            sys.modules["torch"].set_num_threads(int(env["OMP_NUM_THREADS"]))
    if env is os.environ and not _first:
        _first.update(done)
    return done


def _xla_pool(env: MutableMapping[str, str]) -> tuple[int | None, str]:
    for name in ("PJRT_NPROC", "NPROC"):
        if env.get(name, "").strip().isdigit():
            return int(env[name]), f"{name} (read by XLA's DefaultThreadPoolSize when JAX's CPU client is made)"
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)), "XLA's default: the CPUs this process may run on (MaxParallelism)"
    return None, "not measured: no affinity mask on this OS"


def threads_record(framework: str | None, env: MutableMapping[str, str] | None = None) -> dict[str, Any]:
    """What a CPU row ran under: the framework's intra-op threads, the OpenMP wait policy, who set them."""
    env = os.environ if env is None else env
    by_xmfu = [n for n in env.get(SET_MARK, "").split(",") if n]
    policy = env.get("OMP_WAIT_POLICY")
    out: dict[str, Any] = {
        "framework": framework, "intra_op_threads": None, "intra_op_source": None,
        "omp_wait_policy": policy,
        "omp_wait_policy_set_by": None if policy is None else "xmfu" if "OMP_WAIT_POLICY" in by_xmfu else "environment",
        "omp_num_threads": env.get("OMP_NUM_THREADS"), "set_by_xmfu": by_xmfu, "local_tasks": local_tasks(env),
        "note": None}
    if framework == "jax":
        out["intra_op_threads"], out["intra_op_source"] = _xla_pool(env)
    elif framework == "torch" and "torch" in sys.modules:  # torch backends, and Triton's (on torch tensors)
        out["intra_op_threads"] = sys.modules["torch"].get_num_threads()
        out["intra_op_source"] = "torch.get_num_threads()"
    if _first.get("torch_loaded_before") and "OMP_WAIT_POLICY" in _first.get("set", []):
        out["note"] = ("torch was imported before xmfu set OMP_WAIT_POLICY: OpenMP had already read its wait policy, "
                       "so the one recorded may not be in force")
    return out
