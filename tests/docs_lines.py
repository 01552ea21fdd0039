"""The shell lines the docs show (README.md and docs/*.md), for tests/e2e/test_docs_commands.py (which runs each CPU
line as written) and tests/cli/test_docs_lines_parse.py (which checks that every documented `xmfu` line parses).

The convention, stated in docs/README.md: a command a reader is meant to type sits in a fenced ```sh block (or, on
the front page, in the first cell of the main-commands table, `xmfu ...`). A line that needs more than a CPU says so
in a parenthesised note in its own comment or in the comment line just above it: (GPU), (GPU, ROCm), (TPU),
(Slurm), (needs a Docker engine ...). Lines that need something else this machine lacks (the network, a wheelhouse
made elsewhere, Docker) are listed in SKIPPED below with the reason, where anyone reading the test sees them.
Placeholders (`results/<run_id>`, `A B`, `/shared/xmfu/history`...) are filled in by PLACEHOLDERS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A parenthesised note naming what the line needs beyond a CPU: "# (GPU)", "# (GPU, 4 nodes, Slurm)", "# (Slurm)",
# "# (needs a Docker engine to build; ...)", "(GPU or TPU)".
NEEDS = re.compile(r"\((?:[^)]*?\b)?(GPU|TPU|Slurm|Docker|Kubernetes)\b[^)]*\)")
FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
TABLE_CELL = re.compile(r"^\| `((?:xmfu|make) [^`]*)` \| (.*?) \|$", re.M)

# Lines a CPU-only test machine cannot run as written, and why (matched by substring of the line).
SKIPPED = {
    "make bench": "installs into .venv first (network); the run it makes is `xmfu run experiment=smoke`, which runs",
    "make test": "this test suite itself",
    "make install": "installs (network, or a wheelhouse made elsewhere); tests/test_install.py covers it",
    "make wheelhouse": "downloads wheels (network); tests/test_wheelhouse.py covers it",
    "pip install": "installs (network); tests/e2e/test_wheel.py builds and installs the wheel offline",
    "pip wheel": "builds and installs (network for the build backend); tests/e2e/test_wheel.py covers it",
    "install.sh --offline": "needs a wheelhouse made elsewhere; tests/test_wheelhouse.py covers it",
    "reference_node.sh": "needs a wheelhouse made elsewhere and installs a venv; tests/e2e/test_reference_node.py",
    "docker ": "needs Docker and the vendor's container runtime",
    "make image-": "needs a Docker engine",
    "schema.generate           #": "rewrites the checkout's schema and docs; its --check twin runs",
    "workload=transformer model=tiny     #": "minutes on a CPU (torch_compile's Inductor compile); its "
                                            "experiment=smoke twin in docs/workloads.md runs",
    "backends=[torch_sdpa,my_attention": "needs examples/my_attention installed (the pip line above it); "
                                         "tests/e2e/test_plugin_package.py installs it and runs both lines' runs",
    "xmfu import ": "needs another tool's log; tests/results/importers/test_import_logs.py imports the real ones in "
                    "tests/results/importers/logs the same way",
    "kernels --jobs 8": "every kernel, config, dtype and default target: about 25 minutes of 2 cores; "
                        "docs/kernels.md's quick line runs; the whole sweep is tests/kernelcheck/test_whole_sweep.py "
                        "(make test-kernels)",
    "every config of every kernel for two parts": "tens of minutes of 2 cores; the quick line above it runs",
    "make gpu-reference": "every part at smoke sizes: minutes on a CPU; `gpu_reference.py --part matmul --redo` runs "
                          "one part the same way",
}

# What stands for a bundle, a store or a folder in the docs, and what the test puts there (runs.py's fixtures make
# the bundles). Longest first, so `A1` is replaced before `A`.
PLACEHOLDERS = {
    "results/<run_id>": "{A}",
    "A1 A2 A3 -- B1 B2 B3": "{A} {C} {D} -- {B} {E} {F}",
    "compare A B [C...]": "compare {A} {B} {C}",
    "BUNDLES...": "{A} {B}",
    "FOLDERS...": "results",
    "compare A B": "compare {A} {B}",
    "/shared/xmfu/history": "history-store",
    "/shared/acceptance": "acceptance",
    "/scratch/xmfu-nightly": "nightly",
    "/tmp/xmfu-results": "results",
    "--nproc_per_node=N ": "--nproc_per_node=2 ",
    "--key KEY": "--key lab_key_readme",
    "--store PATH": "--store history-store",
    ".venv/bin/python": "python",  # the test's own venv is first on PATH
    ".venv/bin/xmfu": "$(which xmfu)",
}


@dataclass(frozen=True)
class Line:
    page: str  # README.md or docs/<page>.md
    text: str  # the command as written (continuation lines joined)
    needs: str | None  # what beyond a CPU the docs say it needs (GPU, Slurm...), else None
    skipped: str | None  # why the test cannot run it here, else None

    @property
    def runnable(self) -> bool:
        return self.needs is None and self.skipped is None

    @property
    def id(self) -> str:
        return f"{self.page}: {self.text[:90]}"


def _note(comment: str) -> str | None:
    found = NEEDS.search(comment)
    return found.group(1) if found else None


def _skipped(text: str) -> str | None:
    """Why the test cannot run the line here (SKIPPED; matched against the whole line, comment included)."""
    return next((why for key, why in SKIPPED.items() if key in text), None)


def _block_lines(page: str, block: str) -> list[Line]:
    out, above, pending = [], None, ""
    for raw in block.splitlines():
        stripped = raw.strip()
        if not stripped:
            above = None
            continue
        if stripped.startswith("#"):
            if pending:  # a comment continuing the previous line's (gpu.md's second comment line)
                continue
            above = _note(stripped) or above
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        text = pending + stripped
        pending = ""
        command = text.split(" #", 1)[0] if " #" in text else text
        comment = text[len(command):]
        out.append(Line(page, text, _note(comment) or above, _skipped(text)))
        above = None
    return out


def documented_lines() -> list[Line]:
    """Every command line of the docs, in page order."""
    out: list[Line] = []
    for path in PAGES:
        text = path.read_text()
        page = str(path.relative_to(ROOT))
        for block in FENCE.findall(text):
            out += _block_lines(page, block)
        if path.name == "README.md" and path.parent == ROOT:
            for command, meaning in TABLE_CELL.findall(text):
                out.append(Line(page, command, _note(meaning), _skipped(command)))
    return out


def command_of(line: Line) -> str:
    """The line without its trailing comment (for parsing; the shell runs the whole line)."""
    return line.text.split(" #", 1)[0].strip()


def filled(text: str, bundles: dict[str, str]) -> str:
    """The line with its placeholders replaced by what the test made (bundles: A..F -> a bundle folder)."""
    for key in sorted(PLACEHOLDERS, key=len, reverse=True):
        text = text.replace(key, PLACEHOLDERS[key])
    for name, folder in bundles.items():
        text = text.replace(f"{{{name}}}", folder)
    return text
