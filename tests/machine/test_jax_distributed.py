"""jax.distributed under torchrun and Slurm: each GPU process is pinned to its own GPU (a fake `jax` records the
call; its signature is jax 0.10.2's)."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from tests.fakes import jax_devices as fj
from xmfu.harness.machine.jax_distributed import (
    JaxJoinFailed,
    initialize_jax_distributed,
    jax_coordinator,
    jax_join_in_flight,
)

LAUNCHER_VARIABLES = ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                      "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "CUDA_VISIBLE_DEVICES",
                      "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "JAX_LOCAL_DEVICE_IDS", "JAX_COORDINATOR_ADDRESS",
                      "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


@pytest.fixture(autouse=True)
def _no_join_left(monkeypatch):
    """A join in these tests must not make later tests of this worker look like a multi-process JAX run."""
    from xmfu.harness.machine import jax_distributed

    monkeypatch.setitem(jax_distributed._join, "processes", None)


@pytest.fixture
def jax(monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    module = fj.fake_jax([fj.h100(0)])
    monkeypatch.setitem(sys.modules, "jax", module)
    return module


def torchrun(monkeypatch, rank: int, world: int, local: int) -> None:
    values = {"TORCHELASTIC_RUN_ID": "r", "RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": local,
              "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": 29500}
    for key, value in values.items():
        monkeypatch.setenv(key, str(value))


def slurm(monkeypatch, rank: int, world: int, local: int) -> None:
    for key, value in {"SLURM_JOB_ID": 7, "SLURM_PROCID": rank, "SLURM_NTASKS": world, "SLURM_LOCALID": local}.items():
        monkeypatch.setenv(key, str(value))


@pytest.mark.parametrize("kind", ["cuda", "rocm"])
def test_torchrun_gpu_process_owns_its_local_rank_gpu(jax, monkeypatch, kind):
    torchrun(monkeypatch, rank=11, world=16, local=3)
    initialize_jax_distributed(kind)
    assert jax.distributed.calls == [{"coordinator_address": "10.0.0.1:29501", "num_processes": 16,
                                      "process_id": 11, "local_device_ids": [3]}]


def test_slurm_gpu_process_owns_its_localid_gpu(jax, monkeypatch):
    slurm(monkeypatch, rank=5, world=8, local=1)
    initialize_jax_distributed("cuda")
    assert jax.distributed.calls[0]["local_device_ids"] == [1] and jax.distributed.calls[0]["process_id"] == 5


@pytest.mark.parametrize(("variable", "kind"), [("CUDA_VISIBLE_DEVICES", "cuda"), ("HIP_VISIBLE_DEVICES", "rocm"),
                                                ("ROCR_VISIBLE_DEVICES", "rocm")])
def test_a_process_that_sees_one_gpu_uses_that_one(jax, monkeypatch, variable, kind):
    """srun --gpus-per-task=1 leaves each task one visible GPU: local id 0 whatever SLURM_LOCALID is (torch's
    Platform.device takes local_rank modulo the devices it sees, the same GPU)."""
    slurm(monkeypatch, rank=3, world=4, local=3)
    monkeypatch.setenv(variable, "3")
    initialize_jax_distributed(kind)
    assert jax.distributed.calls[0]["local_device_ids"] == [0]


def test_cpu_processes_are_not_pinned_and_talk_through_gloo(jax, monkeypatch):
    torchrun(monkeypatch, rank=1, world=2, local=1)
    initialize_jax_distributed("cpu")
    assert jax.distributed.calls[0]["local_device_ids"] is None
    assert ("jax_cpu_collectives_implementation", "gloo") in jax.config_updates


def test_tpu_processes_are_not_pinned(jax, monkeypatch):
    torchrun(monkeypatch, rank=1, world=2, local=1)
    initialize_jax_distributed("tpu")
    assert jax.distributed.calls[0]["local_device_ids"] is None


def test_a_user_choice_of_local_devices_is_left_to_jax(jax, monkeypatch):
    torchrun(monkeypatch, rank=1, world=2, local=1)
    monkeypatch.setenv("JAX_LOCAL_DEVICE_IDS", "4,5")  # read by jax.distributed.initialize itself
    initialize_jax_distributed("cuda")
    assert jax.distributed.calls[0]["local_device_ids"] is None


def test_one_process_or_an_initialized_runtime_is_left_alone(jax, monkeypatch):
    initialize_jax_distributed("cuda")
    assert jax.distributed.calls == []
    torchrun(monkeypatch, rank=0, world=2, local=0)
    initialize_jax_distributed("cuda")
    initialize_jax_distributed("cuda")  # a second job of a sweep in the same process
    assert len(jax.distributed.calls) == 1


def test_processes_described_by_jax_variables_join_their_coordinator(jax, monkeypatch):
    """JAX_COORDINATOR_ADDRESS is read by jax.distributed.initialize itself (jax/_src/distributed.py); the process
    count and id come from JAX_NUM_PROCESSES / JAX_PROCESS_ID, which jax 0.10.2 does not read."""
    for key, value in {"JAX_COORDINATOR_ADDRESS": "10.0.0.9:1234", "JAX_NUM_PROCESSES": "4",
                       "JAX_PROCESS_ID": "2"}.items():
        monkeypatch.setenv(key, value)
    initialize_jax_distributed("tpu")
    assert jax.distributed.calls == [{"coordinator_address": None, "num_processes": 4, "process_id": 2,
                                      "local_device_ids": None}]


def test_slurm_without_master_addr_leaves_the_coordinator_to_jax_cluster_detection(jax, monkeypatch):
    slurm(monkeypatch, rank=0, world=16, local=0)
    initialize_jax_distributed("cuda")
    assert jax.distributed.calls[0]["coordinator_address"] is None  # SlurmCluster: the step's first node
    monkeypatch.setenv("MASTER_ADDR", "node7")  # exported by submitit's TorchDistributedEnvironment
    assert jax_coordinator() == "node7:29501"


def test_submitit_local_tasks_are_ranks():
    """submitit's local executor (Hydra's submitit_local launcher) names its tasks like this
    (submitit/local/local.py, LocalJobEnvironment._env)."""
    from xmfu.harness.machine.ranks import process_info

    info = process_info({"SUBMITIT_LOCAL_JOB_ID": "4242", "SUBMITIT_LOCAL_GLOBALID": "1",
                         "SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_LOCAL_LOCALID": "1"})
    assert (info.rank, info.world_size, info.local_rank, info.launcher) == (1, 2, 1, "submitit_local")
    assert not info.writes_bundle


def test_jax_without_is_initialized_is_asked_through_its_state(monkeypatch):
    """jax 0.4.38 has no jax.distributed.is_initialized (scripts/compat.sh floor), only the state it reads."""
    import types

    from xmfu.harness.machine.jax_distributed import jax_distributed_initialized

    distributed = types.ModuleType("jax._src.distributed")
    distributed.global_state = types.SimpleNamespace(client=None)
    legacy = types.SimpleNamespace(distributed=types.SimpleNamespace())  # no is_initialized
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))  # also where no jax is installed
    monkeypatch.setitem(sys.modules, "jax._src", types.ModuleType("jax._src"))
    monkeypatch.setitem(sys.modules, "jax._src.distributed", distributed)
    monkeypatch.setattr(sys.modules["jax._src"], "distributed", distributed, raising=False)
    assert jax_distributed_initialized(legacy) is False
    distributed.global_state.client = object()
    assert jax_distributed_initialized(legacy) is True
    current = types.SimpleNamespace(distributed=types.SimpleNamespace(is_initialized=lambda: True))
    assert jax_distributed_initialized(current) is True


@pytest.mark.parametrize(("version", "bounds"), [
    ("0.10.2", {"initialization_timeout": 68, "heartbeat_timeout_seconds": 68, "shutdown_timeout_seconds": 68}),
    ("0.4.38", {"initialization_timeout": 68}),
])
def test_joining_is_bounded_by_the_workloads_timeout(version, bounds, monkeypatch):
    """JAX's own bounds were 300 s to join (then SIGABRT), 100 s of missed heartbeats and a 300 s exit barrier; now
    each is JOIN_GRACE_S (60 s) after the workload's timeout_s, where the installed JAX's initialize has it (0.4.38:
    joining only): xmfu acts at timeout_s itself (the join, a stalled case, the exit barrier), and JAX's bounds,
    whose end is an abort, come later. (With the heartbeat at timeout_s, a frozen peer ended rank 0 by SIGABRT
    exactly when xmfu's own bound came.)"""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    jax = fj.fake_jax([fj.cpu_device(0)], version=version)
    monkeypatch.setitem(sys.modules, "jax", jax)
    torchrun(monkeypatch, 0, 2, 0)
    initialize_jax_distributed("cpu", 7.5)  # whole seconds, rounded up: JAX's arguments are ints
    assert jax.distributed.bounds == [bounds]
    preemption = [v for name, v in jax.config_updates if name == "jax_enable_preemption_service"]
    assert preemption == ([False] if version == "0.10.2" else [])  # the option exists from jax 0.8.2


@pytest.mark.parametrize("version", ["0.10.2", "0.4.38"])
def test_sigterm_stays_xmfus_after_joining(version, monkeypatch):
    """JAX's preemption notifier takes SIGTERM during initialize (std::signal in SigtermNotifier, openxla/xla
    preemption_notifier.cc) and only logs "SIGTERM caught": a JAX run went on to the end, exit 0. Here the fake's
    initialize replaces the handler as that does; xmfu's handler is in place afterwards."""
    import signal

    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    jax = fj.fake_jax([fj.cpu_device(0)], version=version)
    jax.distributed.on_initialize = _c_ignores_sigterm  # as std::signal does, from whichever thread joins
    monkeypatch.setitem(sys.modules, "jax", jax)
    torchrun(monkeypatch, 1, 2, 1)

    def xmfus(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, xmfus)
    try:
        for timeout_s in (None, 5):  # JAX's own bounds (called here), xmfu's (called in a joining thread)
            jax.distributed.calls.clear()
            initialize_jax_distributed("cpu", timeout_s)
            with pytest.raises(KeyboardInterrupt):  # SIG_IGN left in place would swallow it
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _c_ignores_sigterm() -> None:
    """What SigtermNotifier does: std::signal(SIGTERM, ...) at the C level, behind Python's back (Python's own
    record of the handler, signal.getsignal, stays unchanged)."""
    import ctypes
    import signal

    libc = ctypes.CDLL(None)
    libc.signal.argtypes, libc.signal.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
    libc.signal(signal.SIGTERM, 1)  # SIG_IGN


def _joining(monkeypatch, initialize) -> None:
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    jax = fj.fake_jax([fj.cpu_device(0)])
    jax.distributed.on_initialize = initialize
    monkeypatch.setitem(sys.modules, "jax", jax)
    torchrun(monkeypatch, 0, 2, 0)


def test_a_process_that_never_joins_fails_the_join_within_timeout_s(monkeypatch):
    """jax.distributed.initialize never returned for a missing process: JAX's client ends the process by SIGABRT
    at its own bound (client.h, "Terminating process because the JAX distributed service detected fatal errors"),
    so xmfu could neither record the failure nor choose its exit status. xmfu now waits timeout_s itself."""
    release = threading.Event()
    _joining(monkeypatch, lambda: release.wait(60))
    with pytest.raises(JaxJoinFailed, match=r"2 processes did not all join within 0.5 s"):
        initialize_jax_distributed("cpu", 0.5)
    assert jax_join_in_flight()  # the run left while the join still waited, as it must before JAX's abort
    release.set()
    deadline = time.monotonic() + 10
    while jax_join_in_flight() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not jax_join_in_flight()


def test_a_join_that_raises_is_a_join_failure(monkeypatch):
    def refused():
        raise RuntimeError("DEADLINE_EXCEEDED: Deadline Exceeded\nRPC: /xla.coordination.CoordinationService")

    _joining(monkeypatch, refused)
    with pytest.raises(JaxJoinFailed, match=r"joining the 2 processes failed: DEADLINE_EXCEEDED: Deadline Exceeded$"):
        initialize_jax_distributed("cpu", 5)
    assert not jax_join_in_flight()


@pytest.mark.parametrize("barrier", ["passes", "waits", "raises"])
def test_the_exit_barrier_is_left_within_timeout_s(barrier, monkeypatch):
    """A process that died after its last case never reaches jax.distributed's shutdown barrier: JAX's clean_up at
    exit waited for it until its heartbeat bound, then ended rank 0 by SIGABRT (jax 0.10.2 on CPU: "Shutdown
    barrier has failed", exit 134). xmfu leaves the barrier within timeout_s and says so."""
    from xmfu.harness.machine.jax_distributed import shutdown_within

    release = threading.Event()

    def raises():
        raise RuntimeError("INTERNAL: Shutdown barrier has failed.")

    _joining(monkeypatch, lambda: None)
    initialize_jax_distributed("cpu", 5)
    jax = sys.modules["jax"]
    jax.distributed.on_shutdown = {"passes": None, "waits": lambda: release.wait(60), "raises": raises}[barrier]
    # False for a barrier that waits: shutdown_within returned while it still waited (had it waited for it, the
    # barrier would have passed and the answer been True)
    assert shutdown_within(0.3) is (barrier == "passes")
    release.set()
