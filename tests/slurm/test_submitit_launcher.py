"""The Hydra submitit launcher path (`xmfu run -m hydra/launcher=slurm`, configs/hydra/launcher/slurm.yaml) end to
end on the local Slurm cluster (issue 43 part 2 item 7): submitit submits the job with sbatch, Slurm starts one
task on each of two nodes, the tasks form a torch.distributed group (gloo) from the job (submitit's
TorchDistributedEnvironment), and rank 0 writes a bundle that validates, whose rows name a rank on each node.

The launcher's settings are overridden to fit the local cluster: 2 nodes of 1 task, no GPUs (slurm.yaml asks for
8 per node, which these nodes do not have), 1 CPU per task, the `debug` partition, a 5-minute limit. docs/distributed.md
shows the same line. The cluster keeps no accounting, so submitit's sacct polls fail and it says so on stderr
("Bypassing sacct error"); it then reads the job's outcome from its own folder, as it does on such clusters.
The group's store listens on xmfu's port (harness/machine/ranks.py, rendezvous_port), not submitit's draw from
20000-60000, which here once found its port taken (EADDRINUSE): that range reaches into the ephemeral ports srun
and gloo listen on.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import Cluster
from xmfu.harness.results.bundle.validator import load_bundle

pytestmark = pytest.mark.slurm

LAUNCHER = ["-m", "hydra/launcher=slurm", "hydra.launcher.nodes=2", "hydra.launcher.tasks_per_node=1",
            "hydra.launcher.gpus_per_node=null", "hydra.launcher.cpus_per_task=1", "hydra.launcher.partition=debug",
            "hydra.launcher.timeout_min=5"]
RUN = ["workload=collectives", "backends=[torch_dist]", "workload.ops=[all_reduce]", "workload.sizes=[1M]"]


def test_a_collectives_run_through_the_submitit_launcher_spans_two_nodes(slurm_cluster: Cluster, tmp_path: Path):
    results = tmp_path / "results"
    done = slurm_cluster.run(sys.executable, "-m", "xmfu", "run", *LAUNCHER, *RUN, f"results_dir={results}",
                             timeout=400, check=False, cwd=tmp_path)
    said = f"xmfu run exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, said
    assert "sweep: 1 jobs, 1 succeeded, 0 did not" in done.stdout, said
    found = re.search(r"exit 0, bundle: (\S+)", done.stdout)
    assert found, said
    loaded = load_bundle(found.group(1))
    assert loaded.problems == [] and loaded.bundle is not None, loaded.problems
    bundle = loaded.bundle
    assert Path(found.group(1)).parent == results
    assert bundle.manifest["process"] == {"launcher": "slurm", "local_rank": 0, "nodes": 2, "rank": 0,
                                          "world_size": 2}
    assert bundle.rows and all(r.status == "ok" and r.ranks == 2 for r in bundle.rows), [r.status for r in bundle.rows]
    nodes = set(slurm_cluster.nodes())
    for row in bundle.rows:
        hosts = [host for host, _local_rank, _device in row.notes["rank_map"]]
        assert len(hosts) == 2 and len(set(hosts)) == 2 and set(hosts) <= nodes, row.notes["rank_map"]
        assert row.correctness.ok is True
