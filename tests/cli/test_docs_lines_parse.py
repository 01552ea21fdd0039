"""Every `xmfu` line the docs show parses (issue 30, "Done when"; GPU, Slurm and Docker lines included): a `run` line's
overrides compose and validate as `xmfu run` checks them before it starts anything (hydra_app.validate_job: group
choices, setting names, values, sizes); any other command exists, and each option the line gives is one its --help
lists. Running the CPU lines is tests/e2e/test_docs_commands.py's job (make test-docs); this is its quick twin in
make test."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.docs_lines import ROOT, command_of, documented_lines, filled
from xmfu.harness.cli.main import COMMANDS, main
from xmfu.harness.config.hydra_app import MULTIRUN_FLAGS, split_args, split_jobs, validate_job

# `xmfu CMD ...` wherever the command is started: at the line's start, after `$(which xmfu)` or a venv's bin/, inside
# `$(...)`, or as an image whose entrypoint is xmfu (`xmfu:cuda run ...`).
XMFU = re.compile(r"(?:^|[\s(/])xmfu(?::\w+)? ((?:" + "|".join(COMMANDS) + r")\b[^)]*)")
BUNDLES = {name: f"results/doc-{name.lower()}" for name in "ABCDEF"}


def _argvs() -> list[tuple[str, list[str]]]:
    out, seen = [], set()
    for line in documented_lines():
        found = XMFU.search(filled(command_of(line), BUNDLES))
        if not found:
            continue
        argv = shlex.split(found.group(1))
        if tuple(argv) not in seen:
            seen.add(tuple(argv))
            out.append((f"{line.page}: {' '.join(argv)[:80]}", argv))
    return out


ARGVS = _argvs()
RUN_LINES = [a for a in ARGVS if a[1][0] == "run"]
OTHER_LINES = [a for a in ARGVS if a[1][0] != "run"]


def test_the_docs_show_lines_of_every_kind():
    """The extraction finds the lines (a convention change in the docs would otherwise leave nothing checked)."""
    assert len(RUN_LINES) > 40 and len(OTHER_LINES) > 20
    assert {argv[0] for _, argv in ARGVS} == set(COMMANDS)  # every command is documented by example


@pytest.fixture(scope="module")
def registry():
    from xmfu.workloads.catalog import build_registry

    return build_registry()


EXAMPLE = ROOT / "examples" / "my_attention"


def _example_installed(monkeypatch) -> None:
    """The docs' plug-in lines run after `pip install examples/my_attention`: here its folder on sys.path and its
    entry point (from its pyproject.toml) as the installed one, the same object either way."""
    from xmfu.harness.engine import plugins

    text = (EXAMPLE / "pyproject.toml").read_text()  # (tomllib is Python 3.11+; the suite runs on 3.10 too)
    section = text.split('[project.entry-points."xmfu.backends"]', 1)[1].split("\n[", 1)[0]
    entry = dict(re.findall(r'^(\w+) = "([^"]+)"$', section, re.M))
    assert entry, "examples/my_attention/pyproject.toml declares no xmfu.backends entry point"
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(plugins, "installed", lambda: [plugins.Installed(n, v, "my-attention", "0.1.0")
                                                       for n, v in entry.items()])


@pytest.mark.parametrize("argv", [a for _, a in RUN_LINES], ids=[i for i, _ in RUN_LINES])
def test_a_documented_run_line_composes_and_validates(argv, registry, monkeypatch):
    args = argv[1:]
    if any("my_attention" in a for a in args):
        _example_installed(monkeypatch)
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    for job in split_jobs(split_args(args), multirun):
        validate_job(job, registry)  # raises UsageError / ConfigError with the one-paragraph message


@pytest.mark.parametrize("argv", [a for _, a in OTHER_LINES], ids=[i for i, _ in OTHER_LINES])
def test_a_documented_command_and_its_options_exist(argv, capsys):
    words = [argv[0]]
    if argv[0] in ("history", "fleet"):  # their actions have their own options
        words.append(argv[1])
    assert main([*words, "--help"]) == 0
    helped = capsys.readouterr().out
    options = [a.split("=", 1)[0] for a in argv if a.startswith("--") and a != "--"]  # `--` separates sides
    missing = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", helped)]
    assert not missing, f"xmfu {' '.join(words)} --help does not list {missing}"
