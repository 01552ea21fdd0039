"""`xmfu validate` on an imported bundle: its rows re-built from the log it keeps (bundle.rows_of, the writer's
own function), so a row edited after the import (a printed figure, a disagreement dropped, a bandwidth moved)
no longer matches what its log gives."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from xmfu.harness.results.importers import LogError
from xmfu.harness.results.importers.rows import rows_of, run_key
from xmfu.harness.results.rederive.times import parsed_config, same

SKIP = ("run_id", "started", "finished")  # when it was imported, not what the log says


def import_config(config_text: str) -> dict[str, Any] | None:
    """config.yaml's import settings, or None for a bundle xmfu ran itself."""
    try:
        data = parsed_config(config_text)
    except yaml.YAMLError:
        return None
    spec = data.get("import") if isinstance(data, dict) else None
    return copy.deepcopy(data) if isinstance(spec, dict) and {"tool", "log"} <= set(spec) else None


def problems(config: dict[str, Any], data: dict[str, bytes], manifest: dict[str, Any],
             rows: list[dict[str, Any]], samples: list[dict[str, Any]], where: str) -> list[str]:
    log = str(config["import"]["log"])
    if log not in data:
        return [f"config.yaml imports the log {log!r}, which the bundle does not hold (SHA256SUMS must list it)"]
    try:
        want = rows_of(config, data[log].decode())
    except (LogError, UnicodeDecodeError) as exc:
        return [f"{log}: the kept log no longer imports ({exc})"]
    out = []
    if manifest.get("comparability_key") != run_key(config):
        out.append(f"manifest.json: comparability_key {manifest.get('comparability_key')!r} is not the hash of "
                   f"config.yaml's import settings ({run_key(config)!r})")
    if len(want) != len(rows):
        out.append(f"{where}: {len(rows)} rows, but the kept log {log} gives {len(want)}")
    for number, (row, rec, (expected, values)) in enumerate(zip(rows, samples, want, strict=False), 1):
        for key in sorted((set(row) | set(expected)) - set(SKIP)):
            if not same(row.get(key), expected.get(key)):
                out.append(f"{where} line {number}: {key} is not what the kept log {log} gives: stated "
                           f"{row.get(key)!r}, the log gives {expected.get(key)!r}"[:400])
        if not same(rec.get("samples"), values):
            out.append(f"samples.jsonl line {number}: samples {rec.get('samples')!r} are not the time the kept log "
                       f"printed ({values!r})")
    return out
