"""`xmfu import`: one log as an ordinary bundle: the rows its tool printed (importers/rows.py), the log attached
unchanged, config.yaml naming the import so that `xmfu validate` can re-read the log."""

from __future__ import annotations

import errno
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from xmfu.harness.results.bundle.writer import BundleWriter, RecordError, utc_now
from xmfu.harness.results.importers import MAX_LOG_BYTES, LogError
from xmfu.harness.results.importers.rows import rows_of, run_key, settings


def write(tool: str, log_path: Path, results_dir: Path, argv: list[str], version: str, op: str | None = None,
          ranks: int | None = None) -> Path:
    """The bundle of one log; LogError when it cannot be imported."""
    try:
        size = log_path.stat().st_size
        if size > MAX_LOG_BYTES:
            raise LogError(f"{log_path}: {size} bytes, over the {MAX_LOG_BYTES} bytes one import reads (split it)")
        text = log_path.read_text(errors="strict")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(f"{log_path}: cannot be read as text ({exc})") from None
    name = "imported-" + re.sub(r"[^A-Za-z0-9._-]", "_", log_path.name)[:100]
    config = settings(tool, name, op, ranks)
    rows = rows_of(config, text)
    stamp = utc_now().replace(":", "").replace("-", "")[:15]
    base = f"{tool}-{re.sub(r'[^A-Za-z0-9._-]', '_', log_path.stem)[:60]}-{stamp}"
    manifest = {"created": utc_now(), "xmfu_version": version, "git_sha": None, "argv": argv,
                "overrides": [], "comparability_key": run_key(config), "workload": rows[0][0]["workload"],
                "dtype": rows[0][0]["dtype"], "backends": [rows[0][0]["backend"]]}
    environment = {"imported_from": tool, "log": name, "devices": []}
    writer = _new_bundle(results_dir, base, manifest, yaml.safe_dump(config, sort_keys=True), environment)
    try:  # all or nothing: a log whose rows do not fit, or a disk that fills, leaves no bundle behind
        writer.attach(name, text)
        run_id, line = writer.manifest["run_id"], [0]

        def records() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
            for row, samples in rows:
                line[0], now = row["imported"]["line"], utc_now()
                yield ({"run_id": run_id, **row, "started": now, "finished": now},
                       {"case_id": row["case_id"], "backend": row["backend"], "run_id": run_id, "unit": "s",
                        "samples": samples})
        try:
            writer.append_many(records())  # one write and one sync for the whole log
        except RecordError as exc:
            raise LogError(f"line {line[0]}: {exc}") from None
        writer.finalize("complete")
    except BaseException:
        shutil.rmtree(writer.folder, ignore_errors=True)
        raise
    return writer.folder


def _new_bundle(results_dir: Path, base: str, manifest: dict[str, Any], config: str,
                environment: dict[str, Any]) -> BundleWriter:
    """A new bundle under the run id `base` (the log's name and the second it was imported), or `base-2`,
    `base-3`... where an import of the same second took it (the writer refuses an existing folder)."""
    for attempt in range(1, 1000):
        run_id = base if attempt == 1 else f"{base}-{attempt}"
        try:
            return BundleWriter(results_dir / run_id, {"run_id": run_id, **manifest}, config, environment)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "a thousand imports of this log this second already exist", str(results_dir))
