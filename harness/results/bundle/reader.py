"""Reading a bundle back: the manifest and the rows and samples, as plain dicts.

Nothing here validates; `xmfu.harness.results.bundle.validator.validate_bundle` does, and every command that reads a
bundle runs it first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmfu.harness.results.schema import CASES, ENVIRONMENT, MANIFEST, SAMPLES, TELEMETRY


@dataclass
class Bundle:
    folder: Path
    manifest: dict[str, Any]
    cases: list[dict[str, Any]]
    samples: list[dict[str, Any]]

    def environment(self) -> dict[str, Any]:
        return json.loads((self.folder / ENVIRONMENT).read_text())

    def telemetry(self) -> list[dict[str, Any]]:
        path = self.folder / TELEMETRY
        return read_jsonl(path) if path.exists() else []


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_bundle(folder: str | Path) -> Bundle:
    """Read a bundle (no validation; use `validate_bundle` for that)."""
    folder = Path(folder)
    return Bundle(folder, json.loads((folder / MANIFEST).read_text()), read_jsonl(folder / CASES),
                  read_jsonl(folder / SAMPLES))
