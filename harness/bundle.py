"""Result bundles (schema `xmfu.bundle/1`): a folder of plain files, written as the run goes.

Rows are appended and flushed the moment a case finishes; the manifest and SHA256SUMS are rewritten
atomically after every case, so an interrupted run leaves a bundle that validates, with status `partial`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.interrupts import shielded

SCHEMA = "xmfu.bundle/1"
MANIFEST, CONFIG, ENVIRONMENT = "manifest.json", "config.yaml", "environment.json"
CASES, SAMPLES, SUMS, TELEMETRY = "cases.jsonl", "samples.jsonl", "SHA256SUMS", "telemetry.jsonl"
REQUIRED_FILES = (MANIFEST, CONFIG, ENVIRONMENT, CASES, SAMPLES)
STATUSES = ("complete", "partial", "failed")
ROW_STATUSES = ("ok", "skipped", "incorrect", "failed")
MANIFEST_FIELDS = ("schema", "run_id", "created", "status", "xmfu_version", "git_sha", "argv", "overrides",
                   "comparability_key", "counts")
ROW_FIELDS = ("run_id", "case_id", "workload", "backend", "platform", "device", "dtype", "params", "status",
              "reason", "flops", "flop_convention", "bytes", "time_s", "tflops", "peak_tflops", "peak_source",
              "mfu", "mfu_vs_achievable", "timing_valid", "comparability_key")


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class BundleWriter:
    """Writes one bundle. Call `append` per finished (case, backend) and `finalize` once."""

    def __init__(self, folder: Path, manifest: dict[str, Any], config_yaml: str, environment: dict) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=False)
        self.manifest = {"schema": SCHEMA, **manifest, "status": "partial",
                         "counts": dict.fromkeys(ROW_STATUSES, 0)}
        (folder / CONFIG).write_text(config_yaml)
        (folder / ENVIRONMENT).write_text(json.dumps(environment, indent=2, sort_keys=True, default=str) + "\n")
        for name in (CASES, SAMPLES, TELEMETRY):
            (folder / name).touch()
        self._sync()

    def append(self, row: dict[str, Any], samples: dict[str, Any]) -> None:
        lines = [(name, json.dumps(record, sort_keys=True, allow_nan=False, default=str) + "\n")
                 for name, record in ((CASES, row), (SAMPLES, samples))]
        with shielded():  # a Ctrl-C now waits until both files, the counts and the checksums agree
            for name, line in lines:
                with (self.folder / name).open("a") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
            self.manifest["counts"][row["status"]] += 1
            self._sync()

    def append_telemetry(self, case_id: str, readings: list[dict[str, Any]]) -> None:
        """The time series of one case (perf_counter times; rows hold the per-backend summaries)."""
        if not readings:
            return
        text = "".join(json.dumps({"case_id": case_id, **r}, sort_keys=True, allow_nan=False) + "\n"
                       for r in readings)
        with shielded():
            with (self.folder / TELEMETRY).open("a") as f:
                f.write(text)
            self._sync()

    def update(self, **fields: Any) -> None:
        self.manifest.update(fields)
        self._sync()

    def finalize(self, status: str) -> None:
        self.manifest["status"] = status
        self.manifest["finished"] = utc_now()
        self._sync()

    def _sync(self) -> None:
        _atomic_write(self.folder / MANIFEST, json.dumps(self.manifest, indent=2, sort_keys=True) + "\n")
        names = [*REQUIRED_FILES, *([TELEMETRY] if (self.folder / TELEMETRY).exists() else [])]
        sums = "".join(f"{_sha256(self.folder / n)}  {n}\n" for n in names)
        _atomic_write(self.folder / SUMS, sums)


class NullWriter:
    """What ranks other than 0 of a multi-process run write: nothing (rank 0 gathers their samples)."""

    def __init__(self, folder: Path, manifest: dict[str, Any]) -> None:
        self.folder = folder
        self.manifest = {"schema": SCHEMA, **manifest, "status": "partial"}

    def append(self, row: dict[str, Any], samples: dict[str, Any]) -> None:
        pass

    def append_telemetry(self, case_id: str, readings: list[dict[str, Any]]) -> None:
        pass

    def update(self, **fields: Any) -> None:
        self.manifest.update(fields)

    def finalize(self, status: str) -> None:
        self.manifest["status"] = status


@dataclass
class Bundle:
    folder: Path
    manifest: dict[str, Any]
    cases: list[dict[str, Any]]
    samples: list[dict[str, Any]]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_bundle(folder: str | Path) -> Bundle:
    """Read a bundle (no validation; use `validate_bundle` for that)."""
    folder = Path(folder)
    return Bundle(folder, json.loads((folder / MANIFEST).read_text()), _read_jsonl(folder / CASES),
                  _read_jsonl(folder / SAMPLES))


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
        elif _sha256(folder / name) != listed[name]:
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
    samples, sample_problems = _check_jsonl(folder, SAMPLES, ("case_id", "backend", "samples"))
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
