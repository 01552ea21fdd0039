"""`xmfu validate`: is a folder a complete, untouched `xmfu.bundle/1` bundle? Every problem, by name."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from harness.results.schema import (
    CASES,
    MANIFEST,
    MANIFEST_FIELDS,
    REQUIRED_FILES,
    ROW_FIELDS,
    ROW_STATUSES,
    SAMPLE_FIELDS,
    SAMPLES,
    SCHEMA,
    STATUSES,
    SUMS,
    sha256_file,
)


def _check_sums(folder: Path) -> list[str]:
    problems = []
    listed = {}
    for line in (folder / SUMS).read_text().splitlines():
        digest, _, name = line.partition("  ")
        listed[name.strip()] = digest
    for name in REQUIRED_FILES:
        if name not in listed:
            problems.append(f"{SUMS} does not list {name}")
    for name in listed:
        if not (folder / name).exists():
            problems.append(f"{name} is listed in {SUMS} but missing")
        elif sha256_file(folder / name) != listed[name]:
            problems.append(f"{name}: checksum mismatch (file changed or truncated after the run wrote it)")
    return problems


def _check_jsonl(folder: Path, name: str, required: Iterable[str]) -> tuple[list[dict], list[str]]:
    rows, problems = [], []
    text = (folder / name).read_text()
    if text and not text.endswith("\n"):
        problems.append(f"{name}: last line is incomplete (truncated)")
    for number, line in enumerate(text.splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{name} line {number}: not valid JSON ({exc.msg})")
            continue
        missing = [k for k in required if k not in row]
        if missing:
            problems.append(f"{name} line {number}: missing fields {', '.join(missing)}")
        rows.append(row)
    return rows, problems


def validate_bundle(folder: str | Path) -> list[str]:
    """Every problem found in the bundle at `folder`; an empty list means it is valid."""
    folder = Path(folder)
    if not folder.is_dir():
        return [f"{folder}: not a folder"]
    missing = [n for n in (*REQUIRED_FILES, SUMS) if not (folder / n).is_file()]
    if missing:
        return [f"missing file {n}" for n in missing]
    problems = _check_sums(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except json.JSONDecodeError as exc:
        return [*problems, f"{MANIFEST}: not valid JSON ({exc.msg})"]
    problems += [f"{MANIFEST}: missing field {k}" for k in MANIFEST_FIELDS if k not in manifest]
    if manifest.get("schema") != SCHEMA:
        problems.append(f"{MANIFEST}: schema is {manifest.get('schema')!r}, expected {SCHEMA!r}")
    if manifest.get("status") not in STATUSES:
        problems.append(f"{MANIFEST}: status {manifest.get('status')!r} is not one of {', '.join(STATUSES)}")
    rows, row_problems = _check_jsonl(folder, CASES, ROW_FIELDS)
    samples, sample_problems = _check_jsonl(folder, SAMPLES, SAMPLE_FIELDS)
    problems += row_problems + sample_problems
    counts = dict.fromkeys(ROW_STATUSES, 0)
    for number, row in enumerate(rows, 1):
        if row.get("status") not in ROW_STATUSES:
            problems.append(f"{CASES} line {number}: status {row.get('status')!r} is not one of {ROW_STATUSES}")
        else:
            counts[row["status"]] += 1
    if isinstance(manifest.get("counts"), dict) and manifest["counts"] != counts:
        problems.append(f"{MANIFEST}: counts {manifest['counts']} do not match {CASES} {counts}")
    if len(samples) != len(rows):
        problems.append(f"{SAMPLES} has {len(samples)} records for {len(rows)} rows in {CASES}")
    return problems
