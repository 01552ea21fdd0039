"""The bundle format `xmfu.bundle/1`: its file names, statuses and the fields every record must carry.

A bundle is a folder `<results_dir>/<run_id>/` of plain files (design.md, "Result bundle"). The writer,
the reader and the validator all take their names from here, so the three cannot drift apart.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

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
SAMPLE_FIELDS = ("case_id", "backend", "samples")
# A run id names a folder of results_dir and a file of the history store: a plain name, never a path.
# The same pattern is in xmfu.bundle-1.schema.json ($defs.run_id).
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
