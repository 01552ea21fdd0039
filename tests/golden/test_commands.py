"""What the reading commands print and write on the committed bundles is what it was (tests/golden/commands.py)."""

from __future__ import annotations

import pytest

from tests.golden import commands

pytestmark = [pytest.mark.e2e, pytest.mark.long]


def test_every_reading_command_prints_and_writes_what_it_did(cli, tmp_path):
    commands.scratch(tmp_path)
    found = commands.outputs(cli, tmp_path)
    changed = [name for name, text in found.items()
               if text != commands.expected(name)]
    assert not changed, f"outputs changed: {changed} (python -m tests.golden.commands writes them anew; diff it)"
