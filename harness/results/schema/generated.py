"""Files xmfu generates from its own declarations (the schema, docs/bundle.md's field tables, docs/settings.md,
docs/kernels.md): written where they differ, or, with --check, named as out of date for a test to fail on."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def write_or_check(wanted: Mapping[Path, str], command: str, check: bool) -> int:
    """Each path whose text is not `wanted`'s (a missing file included): with `check`, named with the command that
    regenerates it (exit status 1 where any is); else written and named (0)."""
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if check:
        for path in stale:
            print(f"out of date: {path} (run {command})")
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {path}")
    return 0
