"""The bundle format `xmfu.bundle/2`: its file names and statuses here; its records, typed, in row.py and
records.py (built on types.py); the published JSON Schema generated from them by generate.py.

A bundle is a folder `<results_dir>/<run_id>/` of plain files. The writer, the reader and the validator all take
their names and records from here, so the three cannot drift apart. comparability.py holds the comparability key;
achievable.py what keeps a row's mfu_vs_achievable from being a plain fraction (its mfu_vs_achievable_reason).
Imports nothing of xmfu's but msgspec's records.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from xmfu.harness.results.schema.records import ACCEPTED_SCHEMAS, SCHEMA
from xmfu.harness.results.schema.row import ROW_STATUSES
from xmfu.harness.results.schema.types import RUN_ID_PATTERN

MANIFEST, CONFIG, ENVIRONMENT = "manifest.json", "config.yaml", "environment.json"
CASES, SAMPLES, SUMS, TELEMETRY = "cases.jsonl", "samples.jsonl", "SHA256SUMS", "telemetry.jsonl"
REQUIRED_FILES = (MANIFEST, CONFIG, ENVIRONMENT, CASES, SAMPLES)
STATUSES = ("complete", "partial", "failed")
RUN_ID = re.compile(RUN_ID_PATTERN)

__all__ = ["ACCEPTED_SCHEMAS", "CASES", "CONFIG", "ENVIRONMENT", "MANIFEST", "REQUIRED_FILES", "ROW_STATUSES",
           "RUN_ID", "SAMPLES", "SCHEMA", "STATUSES", "SUMS", "TELEMETRY", "sha256_file"]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
