"""The container words of the fleet job (harness/fleet/job.py), no Slurm needed: pyxis' srun options
(`--container-image`, `--container-mounts`, `--container-workdir`: NVIDIA/pyxis README) and Apptainer's
`apptainer exec --nv --rocm --bind SRC:DST[,...] IMAGE` prefix, as written and as bash expands them when the job
script runs (a stand-in `srun` on PATH records the words each step hands it)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from xmfu.harness.fleet import job
from xmfu.harness.fleet.spec import Container, FleetSpec

IMAGE_PYXIS = "nvcr.io#nvidia/pytorch:24.01-py3"  # an enroot URI: '#' between registry and image
IMAGE_SIF = "/images/xmfu.sif"
MOUNTS = ("/data:/data:ro", "/scratch:/scratch")


def _spec(tmp_path: Path, image: str | None, runtime: str = "pyxis", mounts: tuple[str, ...] = MOUNTS) -> FleetSpec:
    return FleetSpec("c1", 2, "quick", "quick", str(tmp_path), container=Container(image, runtime, mounts),
                     xmfu="xmfu" if image else "python -m xmfu")


def _steps(spec: FleetSpec) -> list[job.Step]:
    nodes = [job.node_ref(i) for i in range(spec.nodes)]
    return [*job.node_steps(spec, nodes), *[s for r in job.pair_rounds(spec, nodes) for s in r],
            *job.all_steps(spec)]


def test_pyxis_words_are_srun_options_and_the_command_is_xmfu_itself(tmp_path):
    spec = _spec(tmp_path, IMAGE_PYXIS)
    for step in _steps(spec):
        srun = job.srun_words(spec, step)
        assert srun[-3:] == [f"--container-image={IMAGE_PYXIS}",
                             "--container-mounts=$F:$F,/data:/data:ro,/scratch:/scratch", "--container-workdir=$F"]
        command = job.command_words(spec, step)
        assert command[:2] == ["xmfu", "run"] and "apptainer" not in command


def test_apptainer_words_prefix_the_command_and_srun_has_no_container_option(tmp_path):
    spec = _spec(tmp_path, IMAGE_SIF, "apptainer")
    for step in _steps(spec):
        assert not any(w.startswith("--container") for w in job.srun_words(spec, step))
        command = job.command_words(spec, step)
        assert command[:7] == ["apptainer", "exec", "--nv", "--rocm", "--bind",
                               "$F:$F,/data:/data:ro,/scratch:/scratch", IMAGE_SIF]
        assert command[7:9] == ["xmfu", "run"]


def test_without_an_image_no_container_word_is_written(tmp_path):
    spec = _spec(tmp_path, None)
    text = job.script(spec)
    assert "--container" not in text and "apptainer" not in text
    assert '"python" "-m" "xmfu" "run"' in text


FAKE_SRUN = """#!/bin/bash
# records the words it was given, one file per call, NUL-separated
printf '%s\\0' "$@" > "$XMFU_TEST_CALLS/$(date +%s%N)-$$"
case "$*" in  # what `xmfu fleet ...` prints
  *"fleet admitted"*) echo n1,n2 ;; *"fleet flagged --links"*) echo n1:n2 ;; *"fleet flagged"*) echo n2 ;;
esac
"""
FAKE_SCONTROL = """#!/bin/bash
[ "$1 $2" = "show hostnames" ] && tr ',' '\\n' <<< "$3"
"""


def _run_script(spec: FleetSpec, tmp_path: Path) -> list[list[str]]:
    """Run the job's script with stand-ins for srun and scontrol; the words of every srun call, expanded."""
    fake, calls = tmp_path / "bin", tmp_path / "calls"
    fake.mkdir()
    calls.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (fake / name).write_text(text)
        (fake / name).chmod(stat.S_IRWXU)
    spec.folder.mkdir(parents=True)
    script = spec.folder / "job-1.sbatch"
    script.write_text(job.script(spec))
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "XMFU_TEST_CALLS": str(calls),
           "SLURM_JOB_NODELIST": "n1,n2", "SLURM_JOB_ID": "7"}
    subprocess.run(["bash", str(script)], env=env, check=True, timeout=60, capture_output=True)
    return [p.read_bytes().decode().split("\0")[:-1] for p in sorted(calls.iterdir())]


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer"])
def test_the_script_hands_srun_the_expanded_container_words(tmp_path, runtime):
    image = IMAGE_PYXIS if runtime == "pyxis" else IMAGE_SIF
    spec = _spec(tmp_path / "results", image, runtime)
    folder = str(spec.folder.resolve())
    calls = _run_script(spec, tmp_path)
    names = [w.split("=", 1)[1] for c in calls for w in c if w.startswith("--job-name=")]
    assert sorted(names) == sorted(["node-n1", "node-n2", "flagged", "node-n2-again", "pair-n1-n2", "flagged-links",
                                    "pair-n1-n2-again", "admitted", "all-collectives", "all-training"])
    binds = f"{folder}:{folder},/data:/data:ro,/scratch:/scratch"
    for words in calls:
        assert not any("$" in w for w in words), words  # $F and ${NODES[i]} expanded by bash
        xmfu = words.index("xmfu")
        if runtime == "pyxis":
            assert words[xmfu - 3:xmfu] == [f"--container-image={image}", f"--container-mounts={binds}",
                                            f"--container-workdir={folder}"]
        else:
            assert words[xmfu - 7:xmfu] == ["apptainer", "exec", "--nv", "--rocm", "--bind", binds, image]
            assert not any(w.startswith("--container") for w in words)
        assert any(w.startswith(f"results_dir={folder}/") for w in words[xmfu:]) or words[xmfu + 1:xmfu + 3] in (
            ["fleet", "admitted"], ["fleet", "flagged"])
        assert words[xmfu + 1:xmfu + 4] != ["fleet", "flagged", "--links"] or words[-1] == folder
    records = sorted(p.name for p in (spec.folder / job.STEPS).glob("*.json"))
    assert len(records) == 7  # every step recorded its end (the judgements print, and are not recorded)
    link = next(c for c in calls if "--job-name=pair-n1-n2-again" in c)
    assert "--nodelist=n1,n2" in link and "run_id=pair-n1-n2-again" in link
    again = next(c for c in calls if "--job-name=node-n2-again" in c)
    assert "--nodelist=n2" in again and "run_id=n2-again" in again
