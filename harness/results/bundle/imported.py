"""`xmfu import`: one log as an ordinary bundle: the rows its tool printed (importers/rows.py), the log attached
unchanged, config.yaml naming the import so that `xmfu validate` can re-read the log."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from xmfu.harness.results.bundle.writer import BundleWriter, utc_now
from xmfu.harness.results.importers import LogError
from xmfu.harness.results.importers.rows import rows_of, run_key, settings


def write(tool: str, log_path: Path, results_dir: Path, argv: list[str], version: str, op: str | None = None,
          ranks: int | None = None) -> Path:
    """The bundle of one log; LogError when it cannot be imported."""
    try:
        text = log_path.read_text(errors="strict")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(f"{log_path}: cannot be read as text ({exc})") from None
    name = "imported-" + re.sub(r"[^A-Za-z0-9._-]", "_", log_path.name)[:100]
    config = settings(tool, name, op, ranks)
    rows = rows_of(config, text)
    stamp = utc_now().replace(":", "").replace("-", "")[:15]
    run_id = f"{tool}-{re.sub(r'[^A-Za-z0-9._-]', '_', log_path.stem)[:60]}-{stamp}"
    manifest = {"run_id": run_id, "created": utc_now(), "xmfu_version": version, "git_sha": None, "argv": argv,
                "overrides": [], "comparability_key": run_key(config), "workload": rows[0][0]["workload"],
                "dtype": rows[0][0]["dtype"], "backends": [rows[0][0]["backend"]]}
    environment = {"imported_from": tool, "log": name, "devices": []}
    writer = BundleWriter(results_dir / run_id, manifest, yaml.safe_dump(config, sort_keys=True), environment)
    writer.attach(name, text)
    for row, samples in rows:
        now = utc_now()
        writer.append({"run_id": run_id, **row, "started": now, "finished": now},
                      {"case_id": row["case_id"], "backend": row["backend"], "run_id": run_id, "unit": "s",
                       "samples": samples})
    writer.finalize("complete")
    return writer.folder

