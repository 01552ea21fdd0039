"""The fleet's sbatch script: srun steps for every node at once, rounds of disjoint pairs, then every node; each
step's end recorded by the script; a resumed job names its hosts and runs only the missing steps."""

from __future__ import annotations

import subprocess

from xmfu.harness.fleet import job
from xmfu.harness.fleet.spec import FleetSpec


def _spec(tmp_path, **kw) -> FleetSpec:
    return FleetSpec("f1", kw.pop("nodes", 4), kw.pop("level", "quick"), kw.pop("pairs", "quick"), str(tmp_path),
                     xmfu="/venv/bin/python -m xmfu", **kw)


def _steps(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.lstrip().startswith("step ")]


def test_the_script_runs_nodes_at_once_then_pair_rounds_then_every_node(tmp_path):
    text = job.script(_spec(tmp_path))
    lines = _steps(text)
    assert [line.split('"')[1] for line in lines] == [
        "node-${NODES[0]}", "node-${NODES[1]}", "node-${NODES[2]}", "node-${NODES[3]}", "node-$host-again",
        "pair-${NODES[0]}-${NODES[1]}", "pair-${NODES[2]}-${NODES[3]}",
        "pair-${NODES[0]}-${NODES[3]}", "pair-${NODES[1]}-${NODES[2]}", "pair-$a-$b-again", "all-collectives",
        "all-training"]
    # after the nodes, after the flagged nodes' checks again, after each round of pairs: the all-node steps run alone
    assert text.count("\nwait") == 4
    # a node whose own figure the first checks flagged is checked again (job.again_lines), named by its own step
    assert '"fleet" "flagged" "$F"' in text and 'for host in ${FLAGGED//,/ }; do' in text
    assert '"node-$host-again"' in text and '"run_id=$host-again"' in text
    # and a flagged link tested again, one after the other (two flagged links may share a node)
    assert '"fleet" "flagged" "--links" "$F"' in text and 'for pair in ${FLAGGED_LINKS//,/ }; do' in text
    assert '"--nodelist=$a,$b"' in text and '"run_id=pair-$a-$b-again"' in text
    # the all-node steps run over the nodes admitted so far, judged by `xmfu fleet admitted` in a step of its own
    assert '"fleet" "admitted" "$F"' in text
    assert '"--nodelist=$ADMITTED"' in lines[-1] and '"--nodes=$N_ADMITTED"' in lines[-1]
    assert "#SBATCH --nodes=4" in text and "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --time=" in text
    assert 'mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")' in text
    assert '"experiment=fleet-quick"' in lines[0] and '"--time=10"' in lines[0] and lines[0].endswith(" &")
    assert '"/venv/bin/python" "-m" "xmfu" "run"' in lines[0]
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_exhaustive_pairs_and_the_long_level(tmp_path):
    text = job.script(_spec(tmp_path, nodes=5, level="long", pairs="exhaustive"))
    assert sum(1 for line in _steps(text) if '"pair-' in line) == 11  # 10 pairs, and a flagged one again
    assert '"experiment=acceptance"' in text and '"--time=180"' in text


def test_a_resumed_job_names_its_hosts_and_runs_only_what_is_missing(tmp_path):
    text = job.script(_spec(tmp_path), hosts=["n2", "n3"], steps=["node-n3", "pair-n2-n3"])
    assert [line.split('"')[1] for line in _steps(text)] == ["node-n3", "node-$host-again", "pair-n2-n3",
                                                            "pair-$a-$b-again"]
    assert "#SBATCH --nodelist=n2,n3" in text and "NODES=(n2 n3)" in text and "#SBATCH --nodes=2" in text


def test_a_step_records_its_exit_status_and_what_it_said(tmp_path):
    """The `step` function itself, run by bash with srun stood in by a script that fails."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\necho 'srun: error: n3: task 0: Killed' >&2\nexit 137\n")
    (fake / "srun").chmod(0o755)
    folder = tmp_path / "f"
    (folder / "steps").mkdir(parents=True)
    program = f"F={folder}\n{job.STEP_FUNCTION}\nstep node-n3 n3 --nodes=1 true\n"
    subprocess.run(["bash", "-c", program], env={"PATH": f"{fake}:/usr/bin:/bin"}, check=True)
    record = (folder / "steps" / "node-n3.json").read_text()
    assert '"rc": 137' in record and '"nodes": "n3"' in record
    assert "Killed" in (folder / "steps" / "node-n3.err").read_text()
