"""Reading a bundle back: the manifest, the rows as typed records (schema/row.py `Row` and its sections), and the
samples.

Every reader of rows reads attributes of `Row`, whose declaration holds the one default of every optional field;
the rows as written (`raw_rows`) are for the writers of other formats that must keep an absent key absent (export,
the history store). Nothing here validates; `xmfu.harness.results.bundle.validator.load_bundle` does, and every
command that reads a bundle runs it first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import msgspec

from xmfu.harness.results.schema import CASES, ENVIRONMENT, MANIFEST, SAMPLES, TELEMETRY
from xmfu.harness.results.schema.records import Reading
from xmfu.harness.results.schema.row import Row


def typed(row: Mapping[str, Any]) -> Row:
    """One row as its record: a row the engine has just written, or a line of cases.jsonl. A row that does not fit
    the format is a msgspec.ValidationError (a validated bundle has none)."""
    return msgspec.convert(row, Row)


@dataclass
class Bundle:
    folder: Path
    manifest: dict[str, Any]
    raw_rows: list[dict[str, Any]]  # cases.jsonl as written
    samples: list[dict[str, Any]]
    _typed: list[Row] | None = field(default=None, repr=False)

    @cached_property
    def rows(self) -> list[Row]:
        """The rows as records, decoded once, on first use."""
        return self._typed if self._typed is not None else [typed(r) for r in self.raw_rows]

    def environment(self) -> dict[str, Any]:
        return json.loads((self.folder / ENVIRONMENT).read_text())

    def telemetry(self) -> list[Reading]:
        """telemetry.jsonl's readings as records (schema/records.py Reading)."""
        path = self.folder / TELEMETRY
        return [msgspec.convert(r, Reading) for r in read_jsonl(path)] if path.exists() else []


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_bundle(folder: str | Path) -> Bundle:
    """Read a bundle (no validation; use `load_bundle` for that)."""
    folder = Path(folder)
    return Bundle(folder, json.loads((folder / MANIFEST).read_text()), read_jsonl(folder / CASES),
                  read_jsonl(folder / SAMPLES))
