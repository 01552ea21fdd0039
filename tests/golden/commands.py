"""Every reading command's output on the committed reference bundles (results/reference/), kept in
tests/golden/commands/ and compared byte for byte: a refactor that moves or retypes what the commands read must
leave what they print and write unchanged (issue 37).

`python -m tests.golden.commands` writes the expected outputs anew; run it only where an output is meant to change,
and say why in the commit.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = Path(__file__).resolve().parent / "commands"
REFERENCE = ROOT / "results" / "reference" / "cpu-amd-epyc-2core"
IMPORTED = Path(__file__).resolve().parent / "bundles"  # `xmfu import` of two logs of tests/results/importers/logs
MATMUL = ("20261121T200902Z-matmul-bf16-4703bf", "20261121T200908Z-matmul-bf16-dba50b")
TRANSFORMER = ("20261123T222637Z-transformer-fp32-97b8cd", "20261123T222710Z-transformer-fp32-6cbb67")
COLLECTIVES = ("20261121T204504Z-collectives-fp32-6c6ceb", "20261121T204513Z-collectives-fp32-334e50")
ALL = "bundles/*"

# name -> the command's arguments, and the files it writes (in the scratch folder) that are part of its output
COMMANDS: dict[str, tuple[list[str], list[str]]] = {
    "table": (["table", ALL], []),
    "table-wide": (["table", "--wide", f"bundles/{TRANSFORMER[0]}"], []),
    "compare-matmul": (["compare", *(f"bundles/{b}" for b in MATMUL)], []),
    "compare-matmul-json": (["compare", "--format", "json", *(f"bundles/{b}" for b in MATMUL)], []),
    "compare-transformer-md": (["compare", "--format", "markdown", *(f"bundles/{b}" for b in TRANSFORMER)], []),
    "compare-collectives-csv": (["compare", "--format", "csv", *(f"bundles/{b}" for b in COLLECTIVES)], []),
    "compare-price": (["compare", "--price", "AMD EPYC=2.5", *(f"bundles/{b}" for b in TRANSFORMER)], []),
    "compare-references": (["compare", "--references", ALL], []),
    "compare-references-json": (["compare", "--references", "--format", "json", ALL], []),
    "validate": (["validate", ALL, "imported/*"], []),
    "table-imported": (["table", "imported/*"], []),
    "compare-references-imported": (["compare", "--references", "imported/*"], []),
    "report-imported": (["report", "imported/*", "-o", "imported.html"], ["imported.html"]),
    "export-csv": (["export", ALL, "-o", "rows.csv"], ["rows.csv"]),
    "report": (["report", ALL, "-o", "report.html"], ["report.html"]),
    "history-add": (["history", "add", "--store", "store", ALL], []),
    "history-check": (["history", "check", "--store", "store"], []),
    "history-trend": (["history", "trend", "--store", "store", "-o", "trend.svg"], ["trend.svg"]),
    "history-report": (["history", "report", "--store", "store", "-o", "history.html"], ["history.html"]),
}

_VOLATILE = [
    (re.compile(r"(?i)<dc:date>[^<]*</dc:date>"), "<dc:date>DATE</dc:date>"),  # matplotlib's SVG metadata
]


def scratch(folder: Path) -> None:
    """The reference bundles copied into `folder`/bundles (the imported ones into `folder`/imported): the commands
    read copies, never the committed files."""
    shutil.copytree(REFERENCE, folder / "bundles", ignore=shutil.ignore_patterns("*.html", "*.png"))
    shutil.copytree(IMPORTED, folder / "imported")


def normalized(text: str, folder: Path) -> str:
    text = text.replace(str(folder), "<SCRATCH>")
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text


def outputs(run: Callable[..., object], folder: Path) -> dict[str, str]:
    """name -> what the command printed (exit status, stdout, stderr) and then each file it wrote, in order."""
    import glob
    import subprocess

    found: dict[str, str] = {}
    for name, (args, files) in COMMANDS.items():
        expanded = [a for arg in args for a in (sorted(glob.glob(str(folder / arg))) if "*" in arg else [arg])]
        expanded = [str(Path(a).relative_to(folder)) if a.startswith(str(folder)) else a for a in expanded]
        try:
            done = run(*expanded)
        except Exception as exc:  # a crash is an output too: kept, so its fix shows as a change
            done = subprocess.CompletedProcess(expanded, "raised", "", f"{type(exc).__name__}: {exc}\n")
        parts = [f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"]
        parts += [f"--- {f}\n{(folder / f).read_bytes().decode()}" for f in files]
        found[name] = normalized("".join(parts), folder)
    return found


def expected(name: str) -> str:
    """The kept output, its line ends as written (a CSV's are \\r\\n)."""
    with (EXPECTED / f"{name}.txt").open(newline="") as f:
        return f.read()


def main() -> int:
    import subprocess
    import tempfile

    from xmfu.harness.cli.main import main as xmfu_main

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        scratch(folder)

        def run(*args: str) -> subprocess.CompletedProcess:
            import contextlib
            import io
            import os

            out, err = io.StringIO(), io.StringIO()
            cwd = os.getcwd()
            os.chdir(folder)
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = xmfu_main(list(args))
            finally:
                os.chdir(cwd)
            return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())

        EXPECTED.mkdir(exist_ok=True)
        for name, text in outputs(run, folder).items():
            (EXPECTED / f"{name}.txt").write_text(text, newline="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
