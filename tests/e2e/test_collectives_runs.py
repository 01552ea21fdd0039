"""Collectives end to end: gloo under torchrun with 2 and 4 ranks, JAX on 4 CPU devices, a planted
corruption, and a rank that never joins."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import xla_flags
from tests.e2e.trials import trials
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
SMALL = ["experiment=smoke", "workload.sizes=[1K,64K]", "workload.iters=3", "workload.samples=3",
         "workload.warmup=1", "workload.timeout_s=60"]
TORCH_SKIPS = {("all_reduce", False), ("broadcast", False), ("all_to_all", True), ("all_to_all_v", True)}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "RANK", "WORLD_SIZE")}
    return {**env, **extra}


def _bundle(stdout: str) -> Path:
    return Path(stdout.strip().splitlines()[-1].removeprefix("bundle: "))


def torchrun(n: int, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
           "-m", "xmfu", "run", "workload=collectives", "backends=[torch_dist]", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env=_env(PYTHONPATH=str(REPO)))  # this checkout's xmfu, not an installed copy


@pytest.mark.long  # four ranks for about 20 s: over a minute of one core (make test-slow)
def test_gloo_every_operation_in_and_out_of_place_on_four_ranks(tmp_path):
    """Four ranks, two more processes than cores, at one size (each size adds about 8 s here); two ranks and two sizes
    run in the other torchrun tests below."""
    n = 4
    proc = torchrun(n, *SMALL, "workload.sizes=[64K]", f"results_dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list(tmp_path.glob("*/manifest.json"))) == 1  # rank 0 alone writes
    folder = _bundle(proc.stdout)
    assert validate_bundle(folder) == []
    bundle = read_bundle(folder)
    for row, samples in zip(bundle.raw_rows, bundle.samples, strict=True):
        key = (row["params"]["op"], row["params"]["in_place"])
        if key in TORCH_SKIPS:
            assert row["status"] == "skipped" and row["reason"]
            continue
        assert row["status"] == "ok", (key, row["reason"])
        assert row["correctness"]["ok"] and row["wrong"] == 0
        assert row["ranks"] == n and len(samples["rank_samples"]) == n
        assert row["busbw_gbps"] > 0 and row["algbw_gbps"] > 0
        assert len(row["notes"]["rank_map"]) == n
    assert "collectives" in bundle.manifest["summary"]
    # the ranks exchanged their hostnames: four processes on this one host are one node (results/bundle/nodes.py)
    assert bundle.manifest["process"]["world_size"] == n and bundle.manifest["process"]["nodes"] == 1


@pytest.mark.long  # two ranks, two sizes: 10-20 s here (make test-slow); the splits and data: test_collectives_spec
def test_all_to_all_v_with_uneven_splits_on_two_gloo_ranks(tmp_path):
    proc = torchrun(2, *SMALL, "workload.ops=[all_to_all_v]", f"results_dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_bundle(_bundle(proc.stdout)).raw_rows
    assert len(rows) == 2 and all(r["status"] == "ok" and r["wrong"] == 0 and r["ranks"] == 2 for r in rows)
    for r in rows:  # S: the mean per-rank send buffer, the bus factor nccl-tests' alltoall's
        assert r["bus_factor"] == 0.5 and r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] / 2)
        assert r["notes"]["busiest_rank_send_bytes"] > r["size_bytes_actual"]


@pytest.mark.slow
def test_planted_corruption_is_caught(tmp_path):
    proc = torchrun(2, *SMALL, "workload.ops=[all_gather]", "workload.inject_corruption=true",
                    f"results_dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]  # nothing could be timed: every case is incorrect
    rows = read_bundle(_bundle(proc.stdout)).raw_rows
    assert rows and all(r["status"] == "incorrect" and r["correctness"]["error"] >= 1 for r in rows)
    assert all("#wrong" in r["reason"] or "wrong" in r["correctness"]["metric"] for r in rows)


def test_jax_on_four_cpu_devices(tmp_path):
    env = _env(XLA_FLAGS=xla_flags(4))
    proc = subprocess.run([sys.executable, "-m", "xmfu", "run", "workload=collectives", "backends=[jax]",
                           *SMALL, f"results_dir={tmp_path}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_bundle(_bundle(proc.stdout)).raw_rows
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["params"]["op"] for r in ok} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    assert all(r["notes"]["ranks"] == 4 and r["notes"]["hlo_op"] and r["busbw_gbps"] > 0 for r in ok)
    assert all(r["reason"] for r in rows if r["status"] == "skipped")


@pytest.mark.slow
def test_a_rank_that_never_joins_fails_within_the_timeout(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    proc = subprocess.run([sys.executable, "-m", "xmfu", "run", "workload=allreduce",
                           "backends=[torch_dist]", *SMALL, "workload.timeout_s=3", f"results_dir={tmp_path}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1  # xmfu's own bound ended it (the reason below); how soon: benchmarks/bounds.py
    folder = _bundle(proc.stdout)
    bundle = read_bundle(folder)
    assert validate_bundle(folder) == [] and bundle.manifest["status"] == "partial"
    failed = [r for r in bundle.raw_rows if r["status"] == "failed"]
    assert failed and "not formed within 3 s" in failed[0]["reason"]


@pytest.mark.slow
def test_jax_multi_process_under_torchrun(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
           "xmfu", "run", "workload=collectives", "backends=[jax]", "workload.ops=[all_reduce,all_to_all]",
           "workload.in_place=[false]", *SMALL, f"results_dir={tmp_path}"]
    env = _env(XLA_FLAGS=xla_flags(2))  # 2 processes x 2 devices
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    bundle = read_bundle(_bundle(proc.stdout))
    assert bundle.raw_rows and all(r["status"] == "ok" and r["wrong"] == 0 for r in bundle.raw_rows)
    assert all(r["notes"]["processes"] == 2 and r["notes"]["ranks"] == 4 for r in bundle.raw_rows)
    assert all(len(s["rank_samples"]) == 2 for s in bundle.samples)  # one list per process


def test_slurm_launcher_config_composes(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    proc = subprocess.run([sys.executable, "-m", "xmfu", "run", "hydra/launcher=slurm", "workload=allreduce",
                           "backends=[torch_dist]", "--cfg", "hydra"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert "SlurmLauncher" in proc.stdout and "tasks_per_node: 8" in proc.stdout


def test_slurm_launcher_without_slurm_is_one_paragraph(tmp_path):
    """submitit 1.5.4 raises RuntimeError('Could not detect "srun"...') inside Hydra's sweep: a traceback."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    bare = tmp_path / "bin"  # a PATH with python and no srun, whatever this machine has
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    proc = subprocess.run([sys.executable, "-m", "xmfu", "run", "-m", "hydra/launcher=slurm", "workload=allreduce",
                           "backends=[torch_dist]"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=_env(PATH=str(bare)))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "no Slurm (no `srun` on PATH)" in proc.stderr
    assert "hydra/launcher=submitit_local" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_row(cases: Path, procs: list[subprocess.Popen], deadline: float) -> None:
    while not (cases.exists() and cases.read_text().strip()):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "no row was written"
        time.sleep(0.2)


def _two_ranks(tmp_path: Path, run_id: str, overrides: list[str], **env: str) -> list[subprocess.Popen]:
    """Ranks 0 and 1 of a two-process collectives run of this checkout's xmfu (PYTHONPATH), out of place, started
    as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR/PORT), their output piped."""
    port, procs = _free_port(), []
    for rank in (0, 1):
        rank_env = _env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port), PYTHONPATH=str(REPO), **env)
        cmd = [sys.executable, "-m", "xmfu", "run", "workload=collectives", *SMALL, "workload.in_place=[false]",
               *overrides, f"results_dir={tmp_path}", f"run_id={run_id}"]
        procs.append(subprocess.Popen(cmd, cwd=tmp_path, env=rank_env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


@pytest.mark.trials
@pytest.mark.slow(seconds=20)
def test_sigterm_stops_a_jax_distributed_run(tmp_path):
    """JAX's preemption notifier took SIGTERM ("SIGTERM caught") and the run went on to the end, exit 0. A bounded,
    seeded trial loop: SIGTERM to both processes at a drawn moment after the first row; rank 0 must end with 130
    and a partial bundle within the bound, and rank 1 must end too."""
    import random
    import signal

    draw = random.Random(26)
    for trial in range(trials(1)):  # XMFU_TRIALS: tests/e2e/trials.py
        run_id = f"sigterm-{trial}"
        procs = _two_ranks(tmp_path, run_id, ["backends=[jax]", "workload.ops=[all_reduce]",
                                              "workload.sizes=[1K,2K,4K,8K]", "workload.samples=300",
                                              "workload.iters=20", "workload.timeout_s=20"], JAX_PLATFORMS="cpu")
        try:
            _first_row(tmp_path / run_id / "cases.jsonl", procs, time.monotonic() + 240)
            time.sleep(draw.uniform(0.0, 1.0))
            for p in procs:
                p.send_signal(signal.SIGTERM)
            _, err0 = procs[0].communicate(timeout=60)
            procs[1].communicate(timeout=60)
        finally:
            for p in procs:
                p.kill() if p.poll() is None else None
        assert procs[0].returncode == 130, (trial, err0[-3000:])
        assert "interrupted" in err0 and "SIGTERM caught" not in err0
        folder = tmp_path / run_id
        assert read_bundle(folder).manifest["status"] == "partial" and validate_bundle(folder) == []


@pytest.mark.slow(seconds=15)
def test_a_jax_process_that_never_joins_ends_the_run_partial_within_the_timeout(tmp_path):
    """Rank 1 of 2 is never started. JAX's client ended rank 0 itself at its own join bound (SIGABRT, exit 134, a
    C++ stack dump, "Terminating process because the JAX distributed service detected fatal errors"): no closing
    message, no exit status of xmfu's. Now xmfu waits timeout_s for the join: a failed row naming it, a partial
    bundle, exit 1, no traceback."""
    port = _free_port()
    env = _env(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))  # this checkout's xmfu
    proc = subprocess.run([sys.executable, "-m", "xmfu", "run", "workload=collectives", "backends=[jax]", *SMALL,
                           "workload.ops=[all_reduce]", "workload.in_place=[false]", "workload.sizes=[1K]",
                           "workload.timeout_s=3", f"results_dir={tmp_path}", "run_id=never"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    # JAX's own bound would have ended it by SIGABRT (exit 134): exit 1 and xmfu's message say xmfu's bound did;
    # how soon after the 3 s is benchmarks/bounds.py's figure
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Terminating process" not in proc.stderr
    assert "did not all join within 3 s" in proc.stderr and "bundle status partial" in proc.stderr
    folder = tmp_path / "never"
    bundle = read_bundle(folder)
    assert validate_bundle(folder) == [] and bundle.manifest["status"] == "partial"
    assert [r["status"] for r in bundle.raw_rows] == ["failed"]
    assert "did not all join within 3 s" in bundle.raw_rows[0]["reason"]


@pytest.mark.trials
@pytest.mark.slow(seconds=15)  # a trial of 2 processes: about 12 s on 2 cores
def test_a_gloo_rank_frozen_while_a_case_is_prepared_ends_the_run_partial(tmp_path):
    """Two gloo ranks; once the first (small) case's row is written, rank 1 is frozen (SIGSTOP) at a drawn moment
    while it prepares the second, large case (its host-side inputs and expected output take longest there), so
    rank 0 waits in a collective of the preparation (the rank map, or the check's agreement). That case failed
    as if on its own, with a traceback, and the next was prepared on the broken group: the run ended complete,
    exit 0. Now: partial, exit 1, no traceback, within the bound. A bounded, seeded trial loop."""
    import random
    import signal

    draw = random.Random(6)
    for trial in range(trials(1)):  # XMFU_TRIALS: tests/e2e/trials.py
        run_id = f"frozen-{trial}"
        procs = _two_ranks(tmp_path, run_id, ["backends=[torch_dist]", "workload.ops=[all_gather]",
                                              "workload.sizes=[1K,16M,1K]", "workload.samples=1",
                                              "workload.iters=1", "workload.timeout_s=3"])
        try:
            _first_row(tmp_path / run_id / "cases.jsonl", procs, time.monotonic() + 120)
            time.sleep(draw.uniform(0.0, 0.1))
            procs[1].send_signal(signal.SIGSTOP)
            _, err0 = procs[0].communicate(timeout=120)  # gloo's own bound is 30 minutes: xmfu's ended it
        finally:
            procs[1].send_signal(signal.SIGCONT)
            for p in procs:
                p.kill() if p.poll() is None else None
                p.communicate()
        assert procs[0].returncode == 1, (trial, err0[-3000:])
        assert "Traceback" not in err0 and "bundle status partial" in err0, (trial, err0[-3000:])
        folder = tmp_path / run_id
        bundle = read_bundle(folder)
        assert bundle.manifest["status"] == "partial" and validate_bundle(folder) == []
        statuses = [r["status"] for r in bundle.raw_rows]
        assert statuses == ["ok", "failed"], (trial, [r["reason"] for r in bundle.raw_rows])
        assert "run aborted: collective failed" in bundle.raw_rows[1]["reason"]


@pytest.mark.trials
@pytest.mark.slow(seconds=40)  # two pairs of JAX processes at once: 42 s measured here at load average 8
def test_a_jax_rank_frozen_or_killed_after_joining_ends_the_run_partial_within_the_timeout(tmp_path):
    """Two runs of two JAX processes each (gloo on CPU), side by side; once a run's first row is written, its rank 1
    is frozen (SIGSTOP) in one run and killed (SIGKILL) in the other, at a drawn moment. Rank 0 waited in a
    collective until JAX's heartbeat bound and was then ended by JAX's abort (exit 134, "Terminating process
    because the JAX distributed service detected fatal errors", no closing message); a killed rank made rank 0's
    later cases fail one by one, the bundle end `complete`, and the exit barrier abort the same way. Now: the case
    fails within timeout_s, the bundle is partial, exit 1 with xmfu's message. A bounded, seeded trial loop."""
    import random
    import signal

    draw = random.Random(5)
    kinds = (signal.SIGSTOP, signal.SIGKILL)
    for trial in range(trials(1)):  # XMFU_TRIALS: tests/e2e/trials.py
        runs = {how: _two_ranks(tmp_path, f"jax-{how.name}-{trial}", [
            "backends=[jax]", "workload.ops=[all_reduce]", "workload.sizes=[1K,2K,4K,8K]", "workload.samples=300",
            "workload.iters=20", "workload.timeout_s=4"], JAX_PLATFORMS="cpu") for how in kinds}
        ended = {}
        try:
            for how, procs in runs.items():
                _first_row(tmp_path / f"jax-{how.name}-{trial}" / "cases.jsonl", procs, time.monotonic() + 240)
                time.sleep(draw.uniform(0.0, 0.5))
                procs[1].send_signal(how)
            for how, procs in runs.items():  # JAX's own bound would end rank 0 by SIGABRT (exit 134)
                ended[how] = procs[0].communicate(timeout=120)[1]
        finally:
            for procs in runs.values():
                procs[1].send_signal(signal.SIGCONT) if procs[1].poll() is None else None
                for p in procs:
                    p.kill() if p.poll() is None else None
                    p.communicate()
        for how, procs in runs.items():
            err0 = ended[how]
            assert procs[0].returncode == 1, (how.name, trial, err0[-3000:])
            assert "Terminating process" not in err0 and "Traceback" not in err0, (how.name, err0[-3000:])
            assert "bundle status partial" in err0, (how.name, trial, err0[-3000:])
            folder = tmp_path / f"jax-{how.name}-{trial}"
            bundle = read_bundle(folder)
            assert bundle.manifest["status"] == "partial" and validate_bundle(folder) == []
            failed = [r for r in bundle.raw_rows if r["status"] == "failed"]
            assert failed and all("run aborted" in r["reason"] for r in failed), [r["reason"] for r in bundle.raw_rows]
