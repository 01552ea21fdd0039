"""scripts/slurm_local.sh on a real Slurm cluster (the `slurm_cluster` fixture): jobs land on distinct nodes whose
tasks see their node's hostname, a torch.distributed gloo job rendezvouses by hostname across two nodes, status
reports every slurmd, a throttled node is measurably slower, and a killed slurmd's node goes down (and is revived).
The kill test is last: it takes a node away for a while."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.slurm.cluster import SCRIPT, Cluster

pytestmark = pytest.mark.slurm

ALL_REDUCE = """\
import datetime, json, os, socket, sys
import torch
import torch.distributed as dist

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
dist.destroy_process_group()
with open(os.path.join(sys.argv[1], f"rank-{rank}.json"), "w") as out:
    json.dump({"rank": rank, "world": world, "host": socket.gethostname(), "sum": value.item(),
               "master": os.environ["MASTER_ADDR"]}, out)
"""

# A fixed amount of CPU work, timed inside the task: the wall time it took on that node.
CPU_LOOP = """\
import socket, time
start = time.perf_counter()
x = 0
for i in range(2_000_000):
    x += i
print(socket.gethostname(), time.perf_counter() - start)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def test_srun_places_two_tasks_on_two_nodes_named_as_their_node(slurm_cluster: Cluster):
    hosts = slurm_cluster.run("srun", "-N2", "-n2", "hostname", timeout=60).stdout.split()
    assert len(hosts) == 2 and len(set(hosts)) == 2, hosts
    assert set(hosts) <= set(slurm_cluster.nodes())


def test_sbatch_gloo_all_reduce_across_two_nodes(slurm_cluster: Cluster, tmp_path: Path):
    (tmp_path / "all_reduce.py").write_text(ALL_REDUCE)
    job = tmp_path / "job.sh"
    job.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
        export MASTER_PORT={_free_port()}
        exec srun {sys.executable} {tmp_path / 'all_reduce.py'} {tmp_path}
        """))
    done = slurm_cluster.run("sbatch", "--wait", "-N2", "--ntasks-per-node=1", "--time=4",
                             f"--output={tmp_path}/job-%j.out", str(job), timeout=300, check=False, cwd=tmp_path)
    logs = "".join(p.read_text() for p in tmp_path.glob("job-*.out"))
    assert done.returncode == 0, f"sbatch --wait exited {done.returncode}:\n{done.stderr}\n{logs}"
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    assert [r["sum"] for r in ranks] == [3.0, 3.0]
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["host"] != ranks[1]["host"]
    assert ranks[0]["master"] == ranks[0]["host"]  # MASTER_ADDR: the first node's hostname, resolved by /etc/hosts


def test_status_reports_every_node_and_bad_arguments_exit_2(slurm_cluster: Cluster):
    lines = slurm_cluster.status()
    assert len(lines) >= 2
    for i, (node, host, pid) in enumerate(lines, start=1):
        assert node == f"n{i}" and host == node  # the hostname the slurmd's UTS namespace has
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "slurmd"
    for args in (["throttle", "n1", "500"], ["kill", "nosuch"], ["start"], ["bogus"]):
        done = slurm_cluster.script(*args, check=False)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one paragraph
        assert done.stdout == ""


def test_throttled_node_runs_a_cpu_loop_several_times_slower(slurm_cluster: Cluster):
    nodes = slurm_cluster.nodes()
    fast, slow = nodes[0], nodes[-1]
    slurm_cluster.script("throttle", slow, "10")
    try:
        env = slurm_cluster.env
        runs = {node: subprocess.Popen(["srun", "-w", node, "-N1", "-n1", sys.executable, "-c", CPU_LOOP],
                                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for node in (fast, slow)}
        seconds = {}
        for node, run in runs.items():
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, err
            host, took = out.split()
            assert host == node
            seconds[node] = float(took)
    finally:
        slurm_cluster.script("throttle", slow, "off")
    # 10% of one CPU: about 10x slower alone; > 2x leaves room for a busy host slowing the other node too.
    assert seconds[slow] > 2 * seconds[fast], seconds


def test_killed_slurmd_takes_its_node_down_and_revive_brings_it_back(slurm_cluster: Cluster):
    node = slurm_cluster.nodes()[-1]
    slurm_cluster.script("kill", node)
    try:
        assert [fields for fields in slurm_cluster.status() if fields[0] == node] == [[node, node, "-"]]
        # SlurmdTimeout=10 and slurmctld's ping cycle: about 30 s here.
        state = slurm_cluster.wait_state(node, "down", seconds=120)
        assert state.startswith("down"), f"{node} is {state!r} in sinfo 120 s after its slurmd was killed"
    finally:
        revived = slurm_cluster.script("revive", node, check=False)
    assert revived.returncode == 0, revived.stderr
    assert slurm_cluster.state(node) == "idle"


def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True, timeout=30)
