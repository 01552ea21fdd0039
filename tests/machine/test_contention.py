"""Contention: other processes on the host or the timed GPU while a case is measured (a made-up /proc)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmfu.harness.machine import contention


def _proc(root: Path, procs: dict[int, tuple[str, int, int]], load: str = "2.50 1.20 0.80 3/200 999") -> Path:
    """A /proc with `pid -> (name, ppid, utime+stime ticks)` in proc(5)'s stat layout."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "loadavg").write_text(load + "\n")
    for pid, (name, ppid, ticks) in procs.items():
        (root / str(pid)).mkdir(exist_ok=True)
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 30
        (root / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")
    return root


def test_a_busy_neighbour_on_a_cpu_run_is_flagged(tmp_path):
    start = contention.snapshot(_proc(tmp_path / "a", {1: ("init", 0, 0), 10: ("python", 1, 100),
                                                         20: ("stress (x) y", 1, 0), 30: ("idle", 1, 5)}))
    end = contention.snapshot(_proc(tmp_path / "b", {1: ("init", 0, 0), 10: ("python", 1, 400),
                                                       20: ("stress (x) y", 1, 50), 30: ("idle", 1, 5)}))
    end.t = start.t + 1.0  # one second: 50 ticks of another process = half a core
    record = contention.assess(start, end, own={10}, gpu_processes=None, on_gpu=False)
    assert record["contended"] and record["reason"] == "stress (x) y (pid 20) used 50% of a core"
    assert record["busiest_others"][0]["core_share"] == 0.5 and record["load_avg"] == (2.5, 1.2, 0.8)
    quiet = contention.assess(start, start, own={10}, gpu_processes=None, on_gpu=False)
    assert not quiet["contended"] and quiet["busiest_others"] == []


def test_any_other_compute_process_on_the_timed_gpu_is_contention(tmp_path):
    snap = contention.snapshot(_proc(tmp_path, {10: ("python", 1, 0)}))
    gpu = [{"pid": 10, "is_self": True, "name": "python"}, {"pid": 77, "is_self": False, "name": "trainer"}]
    record = contention.assess(snap, snap, own={10}, gpu_processes=gpu, on_gpu=True)
    assert record["contended"] and "trainer (pid 77)" in record["reason"]
    alone = contention.assess(snap, snap, own={10}, gpu_processes=gpu[:1], on_gpu=True)
    assert not alone["contended"] and alone["gpu_processes"] == []


def test_own_processes_include_the_other_ranks_under_torchrun(tmp_path):
    snap = contention.snapshot(_proc(tmp_path, {1: ("init", 0, 0), 5: ("torchrun", 1, 0), 10: ("rank0", 5, 0),
                                                  11: ("rank1", 5, 0), 12: ("worker", 11, 0), 99: ("other", 1, 0)}))
    assert contention.own_processes(snap, pid=10, under_launcher=True) == {5, 10, 11, 12}
    assert contention.own_processes(snap, pid=10, under_launcher=False) == {10}


def _ns(root: Path, inode: int) -> Path:
    """A /proc whose self/ns/pid link reads as namespaces(7) shows it."""
    (root / "self" / "ns").mkdir(parents=True, exist_ok=True)
    (root / "self" / "ns" / "pid").symlink_to(f"pid:[{inode}]")
    return root


def test_the_pid_namespace_is_read_from_proc(tmp_path):
    assert contention.pid_namespace(_ns(tmp_path / "host", 0xEFFFFFFC)) == {
        "inode": 4026531836, "initial": True, "reason": None}
    assert contention.pid_namespace(_ns(tmp_path / "container", 4026532671))["initial"] is False
    unreadable = contention.pid_namespace(tmp_path / "none")
    assert unreadable["initial"] is None and unreadable["reason"]


def test_in_a_container_without_host_pids_gpu_processes_are_not_contention(tmp_path):
    # docker run without --pid=host: NVML lists xmfu itself under its host PID (41873), which is no PID of ours
    snap = contention.snapshot(_proc(tmp_path / "p", {1: ("python", 0, 0)}))
    gpu = [{"pid": 41873, "name": None, "used_memory_bytes": 2 << 30, "kinds": ["compute"], "is_self": False}]
    container = contention.pid_namespace(_ns(tmp_path / "c", 4026532671))
    record = contention.assess(snap, snap, own={1}, gpu_processes=gpu, on_gpu=True, pid_ns=container)
    assert not record["contended"] and record["reason"] is None
    assert record["gpu_processes_attributed"] is False and "PID namespace" in record["gpu_processes_note"]
    assert record["gpu_processes"][0]["pid"] == 41873 and record["gpu_processes"][0]["is_self"] is None
    assert record["pid_namespace"]["initial"] is False
    # on the host the same list is another process on the timed GPU
    host = contention.pid_namespace(_ns(tmp_path / "h", 0xEFFFFFFC))
    on_host = contention.assess(snap, snap, own={1}, gpu_processes=gpu, on_gpu=True, pid_ns=host)
    assert on_host["contended"] and on_host["gpu_processes_attributed"] is True


def _sched(root: Path, pid: int, tasks: dict[int, tuple[int, int]]) -> None:
    """/proc/<pid>/task/<tid>/schedstat: ns on a cpu, ns waiting on a runqueue, timeslices (sched-stats.rst)."""
    for tid, (run, wait) in tasks.items():
        (root / str(pid) / "task" / str(tid)).mkdir(parents=True, exist_ok=True)
        (root / str(pid) / "task" / str(tid) / "schedstat").write_text(f"{run} {wait} 7\n")


def test_a_case_whose_threads_waited_for_a_core_is_oversubscribed(tmp_path):
    """Two threads of ours each kept off a core 0.3 s of a 1 s case (torch's pool and JAX's on 2 cores): 60%."""
    a, b = _proc(tmp_path / "a", {10: ("python", 1, 0)}), _proc(tmp_path / "b", {10: ("python", 1, 0)})
    (b / "stat").write_text("cpu  1 2 3 4\nprocs_running 5\n")
    _sched(a, 10, {10: (1_000_000_000, 0), 11: (0, 0)})
    _sched(b, 10, {10: (1_500_000_000, 300_000_000), 11: (400_000_000, 200_000_000), 12: (1, 100_000_000)})
    start, end = contention.snapshot(a, own={10}), contention.snapshot(b, own={10})
    end.t = start.t + 1.0
    record = contention.assess(start, end, own={10}, gpu_processes=None, on_gpu=False)
    assert record["oversubscribed"] and record["contended"]
    queue = record["run_queue"]
    assert queue["wait_s"] == pytest.approx(0.6) and queue["wait_share"] == pytest.approx(0.6)
    assert record["run_queue"]["threads"] == 3 and record["run_queue"]["procs_running"] == 5
    assert "oversubscribed: xmfu's 3 threads waited 0.6 s for a core (60% of the case" in record["reason"]
    on_gpu = contention.assess(start, end, own={10}, gpu_processes=[], on_gpu=True)
    assert on_gpu["oversubscribed"] and not on_gpu["contended"]  # recorded; the host only feeds the device
    calm = contention.assess(start, start, own={10}, gpu_processes=None, on_gpu=False)
    assert calm["oversubscribed"] is False and not calm["contended"]
    unread = contention.assess(contention.snapshot(a), contention.snapshot(b), own={10}, gpu_processes=None,
                               on_gpu=False)
    assert unread["oversubscribed"] is None and unread["run_queue"] is None
