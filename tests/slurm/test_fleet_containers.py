"""The container forms of `xmfu fleet run` on the local Slurm cluster (issue 43 part 2 item 6).

`--test-only` writes the job and has `sbatch --test-only` check it against the cluster (nodes, partition, time):
both forms must pass it, and the written job-1.sbatch must hold pyxis' srun options (`--container-image`,
`--container-mounts`, `--container-workdir`: NVIDIA/pyxis README) or Apptainer's `apptainer exec --nv --rocm --bind
... IMAGE` prefix. sbatch does not read the srun lines, and the local cluster has neither pyxis nor Apptainer, so
the Apptainer form is also run for real with a stand-in `apptainer` on PATH: each step's srun starts it on the
step's nodes, and it records the words it was given instead of starting a container.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import Cluster

pytestmark = pytest.mark.slurm

IMAGE_PYXIS = "nvcr.io#nvidia/pytorch:24.01-py3"
IMAGE_SIF = "/images/xmfu.sif"


def _fleet_test_only(cluster: Cluster, results: Path, fleet_id: str, *extra: str) -> Path:
    done = cluster.run(sys.executable, "-m", "xmfu", "fleet", "run", "--nodes", "2", "--test-only", "--id", fleet_id,
                       "--results-dir", str(results), *extra, timeout=120, check=False)
    assert done.returncode == 0, f"xmfu fleet run --test-only exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.startswith("sbatch --test-only: "), done.stdout
    assert "to start at" in done.stdout  # sbatch's own answer: the job fits the cluster
    script = results / fleet_id / "job-1.sbatch"
    assert script.is_file()
    return script


def _step_lines(script: Path) -> list[str]:
    """The job's `step` lines (the all-node ones sit inside the admitted-nodes test, indented), and whether each is
    a check again (job.again_lines: one line for however many nodes or links are flagged)."""
    return [line.strip() for line in script.read_text().splitlines() if line.lstrip().startswith('step "')]


def _first_checks(lines: list[str]) -> list[str]:
    return [line for line in lines if '-again"' not in line.split(" ", 2)[1]]


def test_pyxis_form_passes_sbatch_test_only_with_the_srun_container_options(slurm_cluster: Cluster, tmp_path):
    script = _fleet_test_only(slurm_cluster, tmp_path, "pyxis", "--container-image", IMAGE_PYXIS,
                              "--container-mounts", "/data:/data:ro")
    lines = _step_lines(script)
    assert len(_first_checks(lines)) == 5  # 2 node checks, 1 pair, the all-node collective and training
    assert len(lines) == 7  # and a flagged node's check and a flagged link's test again
    for line in lines:
        assert (f'"--container-image={IMAGE_PYXIS}" "--container-mounts=$F:$F,/data:/data:ro" '
                '"--container-workdir=$F" "xmfu" "run"') in line
        assert "apptainer" not in line
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


def test_apptainer_form_passes_sbatch_test_only_with_the_exec_prefix(slurm_cluster: Cluster, tmp_path):
    script = _fleet_test_only(slurm_cluster, tmp_path, "apptainer", "--container-image", IMAGE_SIF,
                              "--container-runtime", "apptainer")
    lines = _step_lines(script)
    assert len(_first_checks(lines)) == 5 and len(lines) == 7
    for line in lines:
        assert f'"apptainer" "exec" "--nv" "--rocm" "--bind" "$F:$F" "{IMAGE_SIF}" "xmfu" "run"' in line
        assert "--container-" not in line
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


STAND_IN = """#!/bin/bash
# apptainer's stand-in: records where it ran and the words it was given, then exits 0; as `xmfu fleet admitted`,
# it admits every node of the job (`xmfu fleet flagged` flags none: it prints nothing)
printf '%s\\0' "$(hostname)" "$SLURM_STEP_ID" "$@" > "{calls}/$(hostname)-$SLURM_JOB_ID-$SLURM_STEP_ID-$$"
case "$*" in *"xmfu fleet admitted"*) scontrol show hostnames "$SLURM_JOB_NODELIST" | paste -sd, ;; esac
"""


def test_apptainer_form_runs_each_step_on_its_nodes_under_real_slurm(slurm_cluster: Cluster, tmp_path):
    results = tmp_path / "results"
    script = _fleet_test_only(slurm_cluster, results, "run", "--container-image", IMAGE_SIF,
                              "--container-runtime", "apptainer", "--container-mounts", "/data:/data:ro")
    fake, calls = tmp_path / "bin", tmp_path / "calls"
    fake.mkdir()
    calls.mkdir()
    (fake / "apptainer").write_text(STAND_IN.format(calls=calls))
    (fake / "apptainer").chmod(stat.S_IRWXU)
    env = slurm_cluster.env
    env["PATH"] = f"{fake}:{env['PATH']}"  # sbatch and srun export the environment to the steps (--export=ALL)
    done = subprocess.run(["sbatch", "--wait", str(script)], env=env, capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    folder = (results / "run").resolve()
    logs = "".join(p.read_text() for p in folder.glob("slurm-*.out"))
    assert done.returncode == 0, f"sbatch --wait exited {done.returncode}:\n{done.stderr}\n{logs}"
    nodes = (folder / next(p.name for p in folder.glob("nodes.txt.*"))).read_text().split()
    assert len(nodes) == 2
    records = {p.stem: json.loads(p.read_text()) for p in (folder / "steps").glob("*.json")}
    want = {f"node-{nodes[0]}", f"node-{nodes[1]}", f"pair-{nodes[0]}-{nodes[1]}", "all-collectives",
            "all-training"}
    assert set(records) == want, records
    assert all(r["rc"] == 0 for r in records.values()), records
    every = [p.read_bytes().decode().split("\0")[:-1] for p in calls.iterdir()]
    binds = f"{folder}:{folder},/data:/data:ro"
    for _host, _step, *words in every:
        assert words[:6] == ["exec", "--nv", "--rocm", "--bind", binds, IMAGE_SIF], words
        assert words[6:8] in (["xmfu", "run"], ["xmfu", "fleet"]), words
    # the judgements (fleet flagged, flagged --links, admitted) run on the first node, in the container too
    judged = sorted(" ".join(w for w in words[7:] if w != str(folder)) for _h, _s, *words in every
                    if words[7] == "fleet")
    assert judged == ["fleet admitted", "fleet flagged", "fleet flagged --links"], judged
    ran = [[host, step, *words] for host, step, *words in every if words[7] == "run"]
    by_step: dict[str, list[str]] = {}
    for host, step, *_ in ran:
        by_step.setdefault(step, []).append(host)
    # one task per node of each step: the node checks one each, the pair and the all-node steps both nodes
    assert sorted(len(hosts) for hosts in by_step.values()) == [1, 1, 2, 2, 2], by_step
    assert all(len(set(hosts)) == len(hosts) and set(hosts) <= set(nodes) for hosts in by_step.values())
