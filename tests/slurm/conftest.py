"""A real Slurm cluster on this host for the tests marked `slurm` (make test-slurm; docs/slurm-local.md): the
`slurm_cluster` fixture (tests/slurm/cluster.py says where it comes from and when the tests skip)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.cluster import Cluster, slurm_installed, unavailable

NODES = 4  # the cluster this session starts when none is given: the fleet tests judge four nodes


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    given = os.environ.get("XMFU_SLURM_CONF")
    if given:
        conf = Path(given)
        if not conf.is_file():
            pytest.fail(f"XMFU_SLURM_CONF={given} is not a file (start a cluster with scripts/slurm_local.sh start N"
                        " and export the SLURM_CONF it prints)", pytrace=False)
        cluster = Cluster(conf, conf.parent)
        if len(cluster.nodes()) < 2:
            pytest.fail(f"the cluster of XMFU_SLURM_CONF={given} has fewer than 2 nodes", pytrace=False)
        yield cluster
        return
    if not slurm_installed():
        unavailable("slurmctld is not installed here (apt-get install -y slurm-wlm munge), and XMFU_SLURM_CONF names"
                    " no running cluster")
    if os.geteuid() != 0:
        unavailable("starting a local Slurm cluster needs root (scripts/slurm_local.sh); or export XMFU_SLURM_CONF")
    folder = tmp_path_factory.mktemp("slurm")
    cluster = Cluster(folder / "slurm.conf", folder)
    started = cluster.script("start", str(NODES), check=False)
    if started.returncode != 0:
        cluster.script("stop", check=False)
        pytest.fail(f"scripts/slurm_local.sh start {NODES} exited {started.returncode}:\n{started.stderr}",
                    pytrace=False)
    assert started.stdout.splitlines()[-1] == f"SLURM_CONF={cluster.conf}"
    try:
        yield cluster
    finally:
        stopped = cluster.script("stop", check=False)
        assert stopped.returncode == 0, stopped.stderr
