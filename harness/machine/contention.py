"""Was anything else competing for the device while a case was measured?

On a host: the load average and the CPU time every other process used between two snapshots (Linux
/proc/<pid>/stat, fields utime + stime in clock ticks, proc(5)). A process other than xmfu's own that used more
than 10% of one core during a CPU case marks it `contended`. On a GPU: any other compute process on the timed
device (NVML / amdsmi process lists through the telemetry sampler) marks it. xmfu's own processes are itself and
its children, and under torchrun every rank of the same launch (the launcher's descendants).

In a container with its own PID namespace (docker run without --pid=host, the README's own lines) the GPU process
list cannot be matched to our processes: "the nvidia-driver itself does not support pid-namespaces, so anytime you
query it for the set of processes that are using GPUs, you will always get the host pids, not the container pids"
(NVIDIA's maintainer in NVIDIA/nvidia-docker#1483, as in #179; NVML's own nvmlDeviceGetComputeRunningProcesses page
says nothing of namespaces). xmfu's own process would then look like another one and every GPU row would be
`contended`. So the namespace is read (/proc/self/ns/pid against the initial PID namespace's fixed inode,
PROC_PID_INIT_INO in the kernel's include/linux/proc_ns.h) and, outside the initial one, the listed processes are
recorded as not attributable, never as contention. amdsmi's list comes from the kernel's KFD too; that it also
carries host PIDs is assumed, not checked here.

Oversubscription (more runnable threads than cores, whoever's they are: torch's OpenMP pool spinning while JAX's
pool runs, two tasks of a launcher with a full pool each, another tenant) shows as time xmfu's own threads spent
ready to run but waiting for a core: the second field of /proc/<pid>/task/<tid>/schedstat, "time spent waiting on
a runqueue (in nanoseconds)" (the first: time spent on the cpu; the kernel's Documentation/scheduler/sched-stats.rst).
Summed over xmfu's threads and divided by the case's length it is the average number of them kept off a core; above
RUN_QUEUE_LIMIT the case is `oversubscribed`, and on a CPU (where those threads are the measurement) `contended`.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC = Path("/proc")
PROC_PID_INIT_INO = 0xEFFFFFFC  # the initial PID namespace's inode number (include/linux/proc_ns.h)
CPU_SHARE_LIMIT = 0.10  # of one core
RUN_QUEUE_LIMIT = 0.10  # of the case's length: xmfu's threads waiting for a core, summed
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Snapshot:
    t: float
    load_avg: tuple[float, float, float] | None
    cpu_ticks: dict[int, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    parents: dict[int, int] = field(default_factory=dict)
    sched: dict[int, tuple[int, int]] | None = None  # own threads: tid -> (run ns, run-queue wait ns)
    procs_running: int | None = None  # /proc/stat: runnable threads on the host at the snapshot


def _stat(pid_dir: Path) -> tuple[str, int, int] | None:
    """(name, parent pid, utime + stime ticks) from /proc/<pid>/stat; the name may hold spaces and parentheses."""
    try:
        text = (pid_dir / "stat").read_text()
    except OSError:  # the process ended between listing and reading
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return name, int(fields[1]), int(fields[11]) + int(fields[12])  # ppid is field 4, utime/stime 14/15 (1-based)


def pid_namespace(proc: Path = PROC) -> dict[str, Any]:
    """{"inode", "initial": True | False | None, "reason"}: whether this process is in the initial PID namespace,
    the one GPU drivers report PIDs in. The link reads "pid:[<inode>]" (namespaces(7))."""
    try:
        link = os.readlink(proc / "self" / "ns" / "pid")
        inode = int(link[link.index("[") + 1:link.rindex("]")])
    except (OSError, ValueError) as exc:  # no /proc (not Linux), a sandbox hiding it
        return {"inode": None, "initial": None, "reason": f"{type(exc).__name__}: {exc}"}
    return {"inode": inode, "initial": inode == PROC_PID_INIT_INO, "reason": None}


def thread_sched(pids: set[int], proc: Path = PROC) -> dict[int, tuple[int, int]] | None:
    """tid -> (ns on a cpu, ns waiting on a runqueue) of every thread of `pids`; None where no schedstat is
    readable (not Linux, or a kernel without CONFIG_SCHED_INFO)."""
    out: dict[int, tuple[int, int]] = {}
    for pid in pids:
        for task in (proc / str(pid) / "task").glob("[0-9]*"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                run, wait = (task / "schedstat").read_text().split()[:2]
                out[int(task.name)] = (int(run), int(wait))
    return out or None


def _procs_running(proc: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in (proc / "stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    return None


def snapshot(proc: Path = PROC, own: set[int] | None = None) -> Snapshot:
    """Every process's CPU time and the load; with `own`, also the scheduler statistics of those processes' threads."""
    load = None
    with contextlib.suppress(OSError, ValueError):
        load = tuple(float(v) for v in (proc / "loadavg").read_text().split()[:3])  # type: ignore[assignment]
    snap = Snapshot(time.monotonic(), load, procs_running=_procs_running(proc))
    if own:
        snap.sched = thread_sched(own, proc)
    for pid_dir in proc.glob("[0-9]*"):
        stat = _stat(pid_dir)
        if stat:
            pid = int(pid_dir.name)
            snap.names[pid], snap.parents[pid], snap.cpu_ticks[pid] = stat
    return snap


def own_processes(snap: Snapshot, pid: int | None = None, under_launcher: bool | None = None) -> set[int]:
    """This process and its descendants; under torchrun, every descendant of the launcher (the other ranks)."""
    pid = os.getpid() if pid is None else pid
    if under_launcher is None:
        under_launcher = "TORCHELASTIC_RUN_ID" in os.environ
    root = snap.parents.get(pid, pid) if under_launcher else pid
    own, frontier = {pid, root}, [root]
    children: dict[int, list[int]] = {}
    for child, parent in snap.parents.items():
        children.setdefault(parent, []).append(child)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in own:
                own.add(child)
                frontier.append(child)
    return own


def busiest(start: Snapshot, end: Snapshot, own: set[int], top: int = 3) -> list[dict[str, Any]]:
    """Other processes by the share of one core they used between the snapshots, busiest first."""
    seconds = max(end.t - start.t, 1e-6)
    used = []
    for pid, ticks in end.cpu_ticks.items():
        if pid in own:
            continue
        share = (ticks - start.cpu_ticks.get(pid, ticks)) / TICKS / seconds
        if share > 0:
            used.append({"pid": pid, "name": end.names.get(pid), "core_share": round(share, 3)})
    return sorted(used, key=lambda u: -u["core_share"])[:top]


def run_queue(start: Snapshot, end: Snapshot, cores: int | None = None) -> dict[str, Any] | None:
    """xmfu's threads between the snapshots: time on a core, time waiting for one, the wait as a share of the
    window; None where either snapshot has no scheduler statistics. A thread born in the window counts from 0."""
    if not start.sched or not end.sched:
        return None
    seconds = max(end.t - start.t, 1e-6)
    run = sum(r - start.sched.get(tid, (0, 0))[0] for tid, (r, _) in end.sched.items()) / 1e9
    wait = sum(w - start.sched.get(tid, (0, 0))[1] for tid, (_, w) in end.sched.items()) / 1e9
    if cores is None and hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    return {"run_s": run, "wait_s": wait, "wait_share": wait / seconds, "threads": len(end.sched), "cores": cores,
            "procs_running": end.procs_running}


def oversubscription(queue: dict[str, Any] | None) -> str | None:
    """Why the case counts as oversubscribed, or None (below RUN_QUEUE_LIMIT, or not readable)."""
    if queue is None or queue["wait_share"] <= RUN_QUEUE_LIMIT:
        return None
    return (f"oversubscribed: xmfu's {queue['threads']} threads waited {queue['wait_s']:.3g} s for a core "
            f"({100 * queue['wait_share']:.0f}% of the case; {queue['cores']} cores): more runnable threads "
            "than cores (frameworks or tasks fighting for them, or other work)")


UNATTRIBUTED = ("this process runs in its own PID namespace (a container without --pid=host) and the driver "
                "lists host PIDs, so which listed process is xmfu's cannot be told: recorded, not counted as "
                "contention")


def assess(start: Snapshot, end: Snapshot, own: set[int], gpu_processes: list[dict[str, Any]] | None,
           on_gpu: bool, pid_ns: dict[str, Any] | None = None) -> dict[str, Any]:
    """The contention record of one case: the busiest other processes, the load average, other GPU compute
    processes, and whether it counts as contended (with why). `pid_ns`: pid_namespace()'s answer."""
    others = busiest(start, end, own)
    foreign = pid_ns is not None and pid_ns.get("initial") is False
    if foreign:  # host PIDs: none can be matched to ours, and the is_self test compared PIDs of two namespaces
        gpu_others = [{**p, "is_self": None} for p in gpu_processes or []]
    else:
        gpu_others = [p for p in gpu_processes or [] if not p.get("is_self") and p.get("pid") not in own]
    reasons = []
    if on_gpu and gpu_others and not foreign:
        reasons.append(f"{len(gpu_others)} other process(es) on the timed GPU: "
                       + ", ".join(f"{p.get('name') or '?'} (pid {p['pid']})" for p in gpu_others))
    if not on_gpu and others and others[0]["core_share"] > CPU_SHARE_LIMIT:
        top = others[0]
        reasons.append(f"{top['name']} (pid {top['pid']}) used {100 * top['core_share']:.0f}% of a core")
    queue = run_queue(start, end)
    over = oversubscription(queue)
    if over and not on_gpu:  # on a GPU the host's threads only feed the device: recorded, not counted
        reasons.append(over)
    return {"contended": bool(reasons), "reason": "; ".join(reasons) or None, "busiest_others": others,
            "oversubscribed": None if queue is None else over is not None, "run_queue": queue,
            "load_avg": end.load_avg, "gpu_processes": gpu_others if gpu_processes is not None else None,
            "gpu_processes_attributed": None if gpu_processes is None else not foreign,
            "gpu_processes_note": UNATTRIBUTED if foreign and gpu_processes is not None else None,
            "pid_namespace": pid_ns, "window_s": end.t - start.t}
