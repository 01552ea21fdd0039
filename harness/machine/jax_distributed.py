"""JAX across processes: whether JAX can run here (joining its processes first), the coordinator from the usual
environment, jax.distributed's join and shutdown bounded in time (a peer that never comes must not hang a run), the
local devices each process takes, the signals JAX's runtime would take over, and what has joined."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

from xmfu.harness.machine import compat
from xmfu.harness.machine.frameworks import jax_backend_matches, share_device_memory


def jax_unavailable(platform_kind: str, timeout_s: float | None = None) -> str | None:
    """Why a JAX backend cannot run here, or None. Sets up GPU memory sharing before jax is imported, and joins
    a multi-process run's processes (bounded by `timeout_s`, the workload's, where it has one)."""
    import importlib.util

    share_device_memory()
    # A CPU run (no accelerator found, or device=cpu asked for) keeps JAX off any plugin: no probing warnings,
    # and JAX times the host that run measures. Detection asks JAX itself wherever a GPU/TPU plugin is
    # installed, so a machine with an accelerator JAX can use never reaches this as "cpu" unless told to.
    if platform_kind == "cpu":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if importlib.util.find_spec("jax") is None:
        return "jax is not installed (pip install 'xmfu[jax]')"
    why = compat.too_old("jax")
    if why:
        return why
    initialize_jax_distributed(platform_kind, timeout_s)
    ok, why = jax_backend_matches(platform_kind)
    return None if ok else why


def jax_coordinator(environ: Mapping[str, str] | None = None) -> str | None:
    """Where jax.distributed's coordinator listens: None where JAX finds it itself (JAX_COORDINATOR_ADDRESS,
    which jax.distributed.initialize reads; or under Slurm without MASTER_ADDR, the first node of the job step,
    jax/_src/clusters/slurm_cluster.py), else MASTER_PORT + 1 on MASTER_ADDR, beside torch's store."""
    env = os.environ if environ is None else environ
    if env.get("JAX_COORDINATOR_ADDRESS") or ("SLURM_JOB_ID" in env and "MASTER_ADDR" not in env):
        return None
    return f"{env.get('MASTER_ADDR', '127.0.0.1')}:{int(env.get('MASTER_PORT', '29500')) + 1}"


def initialize_jax_distributed(platform_kind: str, timeout_s: float | None = None) -> None:
    """Join the processes of a multi-process run (torchrun's, Slurm's, or JAX_COORDINATOR_ADDRESS /
    JAX_NUM_PROCESSES / JAX_PROCESS_ID) with jax.distributed, before JAX first touches a device.

    On GPUs each process is pinned to its own GPU: without `local_device_ids` every process would see every
    GPU of its node (jax 0.10.2 pins by itself only where its cluster detection knows the launcher, Slurm or
    Open MPI, not torchrun: jax/_src/clusters/cluster.py auto_detect_unset_distributed_params).
    `timeout_s` (the workload's `timeout_s`; None: JAX's own defaults) bounds joining, the heartbeats and the
    shutdown barrier, where this JAX has the setting (jax_join_options). SIGTERM stays xmfu's (keep_signals).
    No-op for one process or when jax.distributed is already up (a later job of a sweep in this process).
    """
    from xmfu.harness.machine.ranks import process_info

    proc = process_info()
    if proc.world_size < 2:
        return
    import jax

    if jax_distributed_initialized(jax):
        return
    if platform_kind == "cpu":  # CPU devices of different processes talk through gloo
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # jax.distributed.initialize(coordinator_address, num_processes, process_id, local_device_ids, ...) in 0.10.2;
    # local_device_ids restricts this process's GPUs (it sets jax_cuda/rocm_visible_devices).
    def join() -> None:
        jax.distributed.initialize(coordinator_address=jax_coordinator(), num_processes=proc.world_size,
                                   process_id=proc.rank,
                                   local_device_ids=jax_local_device_ids(platform_kind, proc.local_rank),
                                   **jax_join_options(jax.distributed.initialize, timeout_s))

    with keep_signals(jax):
        if timeout_s is None:
            join()
        else:
            join_within(join, timeout_s, proc.world_size)
            import atexit

            atexit.register(_leave_within, timeout_s)
    _join["processes"] = proc.world_size


class JaxJoinFailed(RuntimeError):
    """The processes of a multi-process JAX run did not all join (within the workload's timeout_s, or JAX's
    initialize raised): nothing distributed can run, so the workloads end the run with it (RunAborted)."""


# How much longer than timeout_s JAX's own bounds are (the join's, the heartbeat's, the shutdown barrier's), when
# xmfu keeps timeout_s itself (join_within, engine/stall.py, shutdown_within): the time left to write the failed
# row, finish the bundle and leave before JAX's abort. A fixed margin, not measured.
JOIN_GRACE_S = 60


_join: dict[str, Any] = {"thread": None, "processes": None}  # the join in flight; how many processes joined


def join_within(join: Any, timeout_s: float, world_size: int) -> None:
    """Run `join` (jax.distributed.initialize) in a daemon thread and wait at most `timeout_s` for it.

    When a process never joins, JAX's client ends the whole process itself once its initialization_timeout has
    passed: the connect's error goes to the client's missed-heartbeat callback, whose default is
    `LOG(FATAL) << "Terminating process because the JAX distributed service detected fatal errors..."`
    (openxla/xla, xla/pjrt/distributed/client.h; the stack seen with jax 0.10.2 runs
    CoordinationServiceAgent::Connect -> SetError -> that callback, exit by SIGABRT): no exception comes back to
    Python, so xmfu could not record the failure, close the bundle or choose its exit status. Waiting here
    instead keeps the bound xmfu's: JAX's own bound is `timeout_s + JOIN_GRACE_S` (jax_join_options), and on
    timeout the caller gets JaxJoinFailed while the join is still in flight; the run must then end promptly and
    without Python's normal shutdown (jax_join_in_flight), before that abort. The wait on the thread wakes for
    signals, so SIGTERM/SIGINT still end the run meanwhile.
    """
    import threading

    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            join()
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="xmfu-jax-join", daemon=True)
    _join["thread"] = thread
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise JaxJoinFailed(f"jax.distributed: the {world_size} processes did not all join within {timeout_s:g} s "
                            "(workload.timeout_s); a process never started, died or cannot reach the coordinator "
                            f"at {jax_coordinator()}")
    _join["thread"] = None
    if "error" in box:
        first = (str(box["error"]).splitlines() or [type(box["error"]).__name__])[0][:300]
        raise JaxJoinFailed(f"jax.distributed: joining the {world_size} processes failed: {first}") from None


def jax_join_in_flight() -> bool:
    """Whether a jax.distributed join given up by join_within (timed out, or interrupted) is still running: JAX
    will end the process by SIGABRT when its own bound passes, and Python's normal shutdown would run JAX's exit
    hook against a half-joined client. A run ending with this True leaves at once (os._exit) after its bundle is
    finished and its message printed."""
    thread = _join["thread"]
    return thread is not None and thread.is_alive()


# jax.distributed.initialize's bounds, by the release that added each to its signature (jax/_src/distributed.py
# at the tags jax-v0.4.38 ... jax-v0.11.0): initialization_timeout (every supported release, default 300 s),
# heartbeat_timeout_seconds (0.7.0, default 100 s: a process silent that long is declared dead, and every other
# process is then ended by JAX's abort), shutdown_timeout_seconds (0.8.1, default 300 s: how long the exit
# barrier waits for the other processes). Before 0.7.0 the heartbeat is fixed for the public call: 10 missed
# heartbeats 10 s apart (`service_heartbeat_interval_seconds: int = 10`, `service_max_missing_heartbeats: int =
# 10` on State.initialize only, jax-v0.4.38 ... jax-v0.6.2), so there a peer frozen for 100 s ends the others
# by JAX's abort, whatever timeout_s says.
JAX_JOIN_BOUNDS = ("initialization_timeout", "heartbeat_timeout_seconds", "shutdown_timeout_seconds")


def jax_join_options(initialize: Any, timeout_s: float | None) -> dict[str, int]:
    """The bounds of JAX_JOIN_BOUNDS this JAX's `initialize` accepts, each JOIN_GRACE_S after `timeout_s` (whole
    seconds: JAX's arguments are ints): xmfu acts at timeout_s itself (the join: join_within; a frozen or dead
    peer: engine/stall.py; the exit barrier: shutdown_within), and JAX's bounds, whose end is an abort, come later.
    An older JAX keeps its own default for a bound it lacks."""
    if timeout_s is None:
        return {}
    import inspect

    accepted = inspect.signature(initialize).parameters
    seconds = max(1, math.ceil(timeout_s)) + JOIN_GRACE_S
    return {name: seconds for name in JAX_JOIN_BOUNDS if name in accepted}


def jax_processes_joined() -> int:
    """How many processes xmfu's jax.distributed join joined in this process: 1 before a join (or without one).
    A plain read: the stall watchdog asks it from its own thread, where a call into JAX could block."""
    return int(_join.get("processes") or 1)


def shutdown_within(timeout_s: float) -> bool:
    """Leave jax.distributed (jax.distributed.shutdown: its barrier waits for every process) within `timeout_s`,
    from a daemon thread: True when it did, without error. A process that died after its last case never
    reaches the barrier, and JAX's own end to that wait is an abort (its heartbeat or shutdown bound, see
    JAX_JOIN_BOUNDS, set JOIN_GRACE_S later); False tells the caller to leave at once with its own status."""
    import threading

    jax = sys.modules.get("jax")
    if jax is None or not jax_distributed_initialized(jax):
        return True
    failed: list[BaseException] = []

    def target() -> None:
        try:
            jax.distributed.shutdown()
        except BaseException as exc:  # e.g. the barrier's error, raised into Python
            failed.append(exc)

    thread = threading.Thread(target=target, name="xmfu-jax-shutdown", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return not thread.is_alive() and not failed


def _leave_within(timeout_s: float) -> None:
    """At exit (atexit, registered after the join, so before JAX's own clean_up, which would call
    jax.distributed.shutdown unbounded): the shutdown barrier within timeout_s, else xmfu's message and exit
    status 1 now (os._exit), before JAX's abort."""
    if shutdown_within(timeout_s):
        return
    print(f"xmfu: jax.distributed: not every process reached the shutdown barrier within {timeout_s:g} s "
          "(workload.timeout_s): a process died or froze after its last case; exit status 1", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


@contextmanager
def keep_signals(jax: Any) -> Iterator[None]:
    """Keep SIGTERM and SIGINT xmfu's across jax.distributed.initialize.

    initialize() starts JAX's preemption service, whose notifier replaces the process's SIGTERM handler with one
    that only logs "SIGTERM caught" (openxla/xla, xla/tsl/distributed_runtime/preemption/preemption_notifier.cc:
    `std::signal(SIGTERM, ...)` in SigtermNotifier): `scancel` or torchrun's stop would not stop the run. From
    jax 0.8.2 the service can be switched off (config `jax_enable_preemption_service`, default True,
    jax/_src/distributed.py); before that, and in any case, Python's handlers in place before the call are
    installed again after it (signal.signal puts Python's own C handler back in place of the notifier's).
    """
    import signal

    # Before 0.8.2: AttributeError "Unrecognized config option" (jax/_src/config.py Config.update).
    with suppress(AttributeError):
        jax.config.update("jax_enable_preemption_service", False)
    kept = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in kept.items():
            if handler is not None:  # None: a handler not installed from Python, which Python cannot restore
                signal.signal(s, handler)


def jax_distributed_initialized(jax: Any) -> bool:
    """Whether jax.distributed is already up. jax.distributed.is_initialized() is `global_state.client is not None`
    (jax 0.11.2, jax/_src/distributed.py); jax 0.4.38 has no such function, only that state (scripts/compat.sh
    floor: "module 'jax.distributed' has no attribute 'is_initialized'")."""
    is_initialized = getattr(jax.distributed, "is_initialized", None)
    if is_initialized is not None:
        return bool(is_initialized())
    from jax._src import distributed

    return distributed.global_state.client is not None


# What limits the GPUs a process sees, per vendor; ROCm applies ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES.
VISIBLE_DEVICE_VARIABLES = {"cuda": ("CUDA_VISIBLE_DEVICES",), "rocm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")}


def jax_local_device_ids(platform_kind: str, local_rank: int,
                         environ: Mapping[str, str] | None = None) -> list[int] | None:
    """The GPU a process of a multi-process run owns: its local rank's, counted among the GPUs it can see
    (local_rank modulo their number, as Platform.device picks the torch device). None on CPUs and TPUs, and
    where JAX_LOCAL_DEVICE_IDS already says (jax.distributed.initialize reads it itself)."""
    env = os.environ if environ is None else environ
    if platform_kind not in VISIBLE_DEVICE_VARIABLES or env.get("JAX_LOCAL_DEVICE_IDS"):
        return None
    for variable in VISIBLE_DEVICE_VARIABLES[platform_kind]:
        if env.get(variable):
            visible = [d for d in env[variable].split(",") if d.strip()]
            return [local_rank % len(visible)] if visible else [local_rank]
    return [local_rank]
