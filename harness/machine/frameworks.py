"""Moving xmfu's seeded numpy inputs into each framework, and results back, in one place.

Imports are lazy: a framework that is not installed only matters to the backends that use it.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np

from xmfu.harness.machine import compat, torch_device
from xmfu.harness.machine.dtypes import FP8_FORMATS, storage
from xmfu.harness.machine.tf32 import rocm_tf32_unavailable

TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# by fp8 format (machine/dtypes.py FP8_FORMATS)
TORCH_FP8 = {"e4m3fn": "float8_e4m3fn", "e4m3fnuz": "float8_e4m3fnuz", "e5m2": "float8_e5m2"}


def torch_dtype(dtype: str, fp8: str | None = None) -> Any:
    """The torch dtype of `dtype`; fp8 needs its format (machine/dtypes.FP8_FORMATS), never a guessed one."""
    import torch

    if dtype != "fp8":
        return getattr(torch, TORCH_DTYPES[dtype])
    if fp8 not in TORCH_FP8:
        raise ValueError(f"fp8 needs a format ({', '.join(FP8_FORMATS)}), got {fp8!r}")
    return getattr(torch, TORCH_FP8[fp8])


def to_torch(x: np.ndarray, dtype: str, device: str, fp8: str | None = None) -> Any:
    """A float32 numpy array (already rounded to `dtype`) as a torch tensor of `dtype` on `device`."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(x)).to(device=device).to(torch_dtype(dtype, fp8))


def torch_rows(t: Any, rows: np.ndarray | None) -> np.ndarray:
    """float64 host copy of `t` (or of its `rows`); rows are selected on the device to move less."""
    import torch

    if rows is not None:
        t = t[torch.as_tensor(rows, device=t.device)]
    return t.to(torch.float64).cpu().numpy()


def to_jax(x: np.ndarray, dtype: str, device: Any, fp8: str | None = None) -> Any:
    """`x` as a JAX array of `dtype` on `device`; fp8 needs its format (machine/dtypes.FP8_FORMATS), never a
    guessed one."""
    import jax

    return jax.device_put(np.asarray(x).astype(storage(dtype, fp8)), device)


def jax_rows(x: Any, rows: np.ndarray | None) -> np.ndarray:
    host = np.asarray(x).astype(np.float64)
    return host if rows is None else host[rows]


def make_torch_device_current(device: str) -> None:
    """Make `device` ("cuda:N", ROCm too) torch's current device; nothing for "cpu". torch's events,
    synchronize() and graph captures act on the current device (torch 2.13: torch.cuda.synchronize(None) uses
    current_device(), torch/cuda/__init__.py; Event.record(None) uses current_stream(), torch/cuda/streams.py),
    and Triton launches on it (triton/runtime/jit.py: driver.active.get_current_device()); a rank or a
    `device_index` other than 0 would otherwise work or time on cuda:0 while its tensors live elsewhere. Another
    accelerator ("xpu:N", "neuron:N"...) goes through torch.accelerator (machine/torch_device.py)."""
    if device == "cpu" or device.startswith("cpu:"):
        return
    import torch

    torch_device.set_device(torch, device)  # "cuda:N": torch.cuda.set_device, as always


def torch_unavailable(dtype: str, platform_kind: str, arch: str | None = None) -> str | None:
    """Why a torch backend cannot run `dtype` here, or None. `arch`: the AMD part's gcnArchName, which decides
    whether it has TF32 matrix units (tf32.py)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    why = compat.too_old("torch")  # before anything imports it: an older torch may lack what xmfu calls
    if why:
        return why
    if platform_kind in ("cuda", "rocm"):
        why = _torch_gpu_mismatch(platform_kind)
        if why:
            return why
    elif platform_kind != "cpu":
        why = _torch_accelerator_mismatch(platform_kind)
        if why:
            return why
    if dtype == "tf32" and platform_kind not in ("cuda", "rocm"):
        return f"tf32 needs GPU tensor cores; a {platform_kind} device has none"
    if dtype == "tf32" and platform_kind == "rocm":
        return rocm_tf32_unavailable(arch)
    return None


def _torch_gpu_mismatch(platform_kind: str) -> str | None:
    """A GPU found through JAX may be one torch cannot drive (a CPU-only or other-vendor torch build)."""
    import torch

    if not torch.cuda.is_available():  # CUDA/ROCm only (other accelerators: _torch_accelerator_mismatch)
        return f"this torch build sees no GPU, but the run measures a {platform_kind} device (found through JAX)"
    built_for = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if built_for != platform_kind:
        return f"this torch is a {built_for} build and the run measures a {platform_kind} device"
    return None


def _torch_accelerator_mismatch(platform_kind: str) -> str | None:
    """A device torch does not drive (a TPU found through JAX beside a torch without TorchTPU, say): torch would
    run on the host and be compared with the device's peak."""
    import torch

    device_type = torch_device.accelerator_type(torch)
    drives = torch_device.platform_kind(torch, device_type)[0] if device_type else None
    if drives != platform_kind:
        return (f"torch does not drive the {platform_kind} device here (its accelerator: {drives or 'none'}; "
                f"{platform_kind} needs the vendor's torch backend)")
    return None


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


# What a JAX backend's peak memory is: JAX has no call that resets the allocator's high-water mark
# (Device.memory_stats()["peak_bytes_in_use"] on GPUs and TPUs), so it is the process's so far and an earlier,
# larger case of the same run can set it. Rows say so in `peak_memory_source`.
JAX_PEAK_SOURCE = "device allocator peak since the process started (JAX cannot reset it: earlier cases count)"


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


def local_jax_device(index: int | None = None) -> Any:
    """The device this process measures with JAX: its first local device, or local device `index` (the run's
    `device_index`).

    In a multi-process GPU run each process is pinned to its own GPU (above), so that is the one; jax.devices()
    lists every process's devices, and indexing it by the local rank would pick another process's GPU. A pinned
    process sees one device only: asking it for another is an error, never a silent substitute.
    """
    import jax

    devices = jax.local_devices()
    if index is None:
        return devices[0]
    if index >= len(devices):
        raise RuntimeError(f"device_index {index}: JAX sees {len(devices)} local device(s) in this process "
                           "(a process of a multi-process run is pinned to its own GPU)")
    return devices[index]


def jax_backend_matches(platform_kind: str) -> tuple[bool, str]:
    """JAX must run on the device the run measures: a CPU-only jaxlib on a GPU host would time the host."""
    import jax

    backend = jax.default_backend()
    wanted = {"cuda": ("gpu", "cuda"), "rocm": ("gpu", "rocm"), "tpu": ("tpu",), "cpu": ("cpu",)}[platform_kind]
    if backend in wanted:
        return True, ""
    return False, (f"jax runs on '{backend}' but this run measures a {platform_kind} device; "
                   f"install the jax build for {platform_kind} (e.g. jax[cuda12]) or run with device=cpu")


def xla_cost_flops(compiled: Any) -> float | None:
    """XLA's own FLOP estimate of a compiled program, kept beside the analytic count as a cross-check.

    Best effort: some backends return nothing, and XLA counts elementwise work the conventions leave out.
    """
    try:
        cost = compiled.cost_analysis()
    except Exception:  # not implemented on every backend
        return None
    cost = cost[0] if isinstance(cost, list) and cost else cost
    return float(cost["flops"]) if isinstance(cost, dict) and "flops" in cost else None


def share_device_memory() -> None:
    """Let JAX and torch share one GPU: JAX otherwise grabs 75% of its memory on first use.

    Must run before jax is first imported; a value the user set is kept.
    """
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def release_cached_memory() -> None:
    """Hand torch's cached accelerator blocks back between cases so the next backend or shape can have them. CUDA
    and ROCm as before (torch.cuda.empty_cache once CUDA is initialised); another accelerator through
    machine/torch_device.py (torch.accelerator.empty_cache, 2.8+, itself a no-op before its allocator exists)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    # on a CUDA/ROCm build torch.accelerator.is_available() delegates to torch.cuda.is_available() (torch 2.13
    # torch/accelerator/__init__.py: get_device_module(current_accelerator()).is_available()); before torch had
    # torch.accelerator, accelerator_type asks torch.cuda.is_available() itself
    device_type = torch_device.accelerator_type(torch)
    if device_type == "cuda":
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    elif device_type is not None:
        torch_device.empty_cache(torch, device_type)


TRITON_IMPORTED_TOO_EARLY = ("triton was imported before xmfu could switch on its interpreter; "
                             "start the run with TRITON_INTERPRET=1 in the environment")
TRITON_INTERPRETER_NOTE = "Triton interpreter on a CPU: the result is checked, its time says nothing about hardware"


def use_triton_interpreter() -> bool:
    """Switch Triton to its interpreter (for a CPU run); only possible before triton is first imported.

    Triton decorates its own library functions (tl.cdiv...) when it is imported, in the mode the environment
    says then; a kernel interpreted later would call them compiled and fail.
    """
    if "triton" in sys.modules:
        # Too late to choose: say what triton was imported as (its library functions show the mode), and keep
        # the variable in line with it (a restored environment may have dropped it since).
        interpreted = triton_imported_interpreted()
        if interpreted:
            os.environ["TRITON_INTERPRET"] = "1"
        return interpreted
    os.environ["TRITON_INTERPRET"] = "1"
    return True


def triton_imported_interpreted() -> bool:
    """Whether the imported triton decorated its library in interpreter mode (tl.cdiv is then an
    InterpretedFunction instead of a JITFunction: triton/runtime/interpreter.py, triton/language/core.py)."""
    language = sys.modules.get("triton.language")
    return language is not None and type(getattr(language, "cdiv", None)).__name__ == "InterpretedFunction"




def triton_unavailable(platform_kind: str) -> str | None:
    """Why Triton cannot run here, or None. Looks packages up without importing triton (see above)."""
    import importlib.util

    if platform_kind == "tpu":
        return "Triton does not target TPUs"
    for package in ("torch", "triton"):
        if importlib.util.find_spec(package) is None:
            return f"{package} is not installed (pip install 'xmfu[triton]')"
    why = compat.too_old("triton")
    if why:
        return why
    if platform_kind in ("cuda", "rocm"):  # xmfu's Triton kernels take torch's GPU tensors
        why = _torch_gpu_mismatch(platform_kind)
        if why:
            return why
    if platform_kind == "cpu":
        if not use_triton_interpreter():
            return TRITON_IMPORTED_TOO_EARLY
        return compat.triton_interpreter_too_old()
    return None
