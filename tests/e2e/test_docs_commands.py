"""Every CPU line of the docs, run as written (issue 30, "Done when"): README.md's main commands and each line of the
```sh blocks of docs/*.md, in page order, in one scratch folder shaped like a checkout (tests/docs_lines.py says
which lines count, which are left to a GPU, Slurm or Docker, and which are skipped here and why).

A line passes when it exits with its documented status (0 unless EXIT says otherwise) and prints no traceback.
Identical lines (after their placeholders are filled) run once. Run by `make test-docs` (CI's .ci/run calls it):
tens of minutes on 2 cores (the Makefile says what was measured), too long for `make test`, which leaves the
`docs` marker out; tests/cli/test_docs_lines_parse.py checks in seconds that every documented `xmfu` line parses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_lines import ROOT, Line, command_of, documented_lines, filled

pytestmark = [pytest.mark.e2e, pytest.mark.docs]

BUNDLES = {name: f"results/doc-{name.lower()}" for name in "ABCDEF"}
# Lines whose documented exit status on a CPU may be other than 0 (matched by substring of the command).
EXIT = {
    "--fail-on slower": (0, 1),  # "exit 1 when a verdict says slower"
    " doctor": (0, 1),  # "exit 1 naming each problem": a CPU machine may lack what a GPU check wants
    "experiment=nightly": (0, 1, 3),  # "exit 1 on a regression", 3 NOT JUDGED (docs/nightly.md, exit status)
    # A suite's verdict: 0 PASS, 1 FAIL, 3 NOT JUDGED (rows contended, as on a shared CPU: docs/acceptance.md)
    "experiment=acceptance": (0, 3),
    "history check": (0, 1, 4),  # 1 a regression, 4 a failure (docs/nightly.md, `xmfu history check`'s states)
}
TIMEOUT_S = 600


def _lines() -> list[Line]:
    seen, out = set(), []
    for line in documented_lines():
        text = filled(command_of(line), BUNDLES)  # the same command on several pages runs once
        if line.runnable and text not in seen:
            seen.add(text)
            out.append(line)
    return out


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("XMFU_VENV",)}
    # this checkout's code, through the test venv's `xmfu`, `python` and `torchrun` first on PATH
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _shell(command: str, cwd: Path, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A scratch checkout: the repository's files linked in, a results/ of its own (the committed reference runs
    copied), six small bundles for the placeholders (A..F), a history store holding them, a signing key and a
    price file for the lines that name one."""
    here = tmp_path_factory.mktemp("docs")
    for entry in ROOT.iterdir():
        if entry.name not in ("results", ".venv", ".git") and not entry.name.startswith("."):
            (here / entry.name).symlink_to(entry)
    (here / "results").mkdir()
    # copied, not linked: `xmfu archive results` refuses a link (an archive holds regular files only)
    shutil.copytree(ROOT / "results" / "reference", here / "results" / "reference")
    ids = ",".join(Path(b).name for b in BUNDLES.values())
    made = _shell(f"xmfu run -m run_id={ids} workload=matmul backends=[torch] dtype=fp32 workload.sizes=[64] "
                  "workload.shapes=[] timing=quick results_dir=results", here)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    store = _shell(f"xmfu history add {' '.join(BUNDLES.values())} --store history-store", here)
    assert store.returncode == 0, store.stderr[-2000:]
    key = _shell("ssh-keygen -q -t ed25519 -N '' -f lab_key_readme", here)
    assert key.returncode == 0, key.stderr
    (here / "prices.yaml").write_text("NVIDIA H100 80GB HBM3: 2.49\n")  # docs/compare.md's example
    return here


@pytest.mark.parametrize("line", _lines(), ids=lambda line: line.id)
def test_a_documented_cpu_line_runs_as_written(line: Line, workspace: Path):
    command = filled(line.text, BUNDLES)
    done = _shell(command, workspace)
    allowed = next((codes for key, codes in EXIT.items() if key in command), (0,))
    said = f"{line.page}: `{command}` exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode in allowed, said
    assert "Traceback (most recent call last)" not in done.stderr, said
