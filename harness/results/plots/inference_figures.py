"""The inference series a report plots, from bundle rows: decode throughput and model bandwidth utilisation
against batch size, one series per backend, device and shape. Pure: rows in, plain data out (the report draws)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# metric -> (where a decode row keeps it, axis label)
METRICS = {
    "decode_tokens_per_s": (("throughput", "generated_tokens_per_s"), "generated tokens/s (all sequences)"),
    "mbu": (("mbu",), "MBU (bytes per step / step time / peak memory bandwidth)"),
}


def _value(row: Mapping[str, Any], path: tuple[str, ...]) -> float | None:
    node: Any = row
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def plotted(row: Mapping[str, Any]) -> bool:
    params = row.get("params") or {}
    return (row.get("workload") == "inference" and params.get("phase") == "decode" and row.get("status") == "ok"
            and bool(row.get("timing_valid")))


def inference_series(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One series per (metric, backend, device, dtype, model, prompt_len, gen_len) over the ok, timed decode rows:
    {"metric", "y_label", "x_label": "batch", "backend", "device", "dtype", "model", "prompt_len", "gen_len",
    "label", "points": [[batch, value], ...] sorted by batch}. Rows whose value is null (e.g. MBU on a device
    without a known peak bandwidth) are left out; a series with no point is not returned. With several rows
    for one batch (repeated bundles) every point is kept, in input order."""
    groups: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        if not plotted(row):
            continue
        p = row["params"]
        for metric, (path, y_label) in METRICS.items():
            value = _value(row, path)
            if value is None:
                continue
            key = (metric, row.get("backend"), row.get("device"), row.get("dtype"), p.get("name"),
                   p.get("prompt_len"), p.get("gen_len"))
            series = groups.setdefault(key, {
                "metric": metric, "y_label": y_label, "x_label": "batch", "backend": key[1], "device": key[2],
                "dtype": key[3], "model": key[4], "prompt_len": key[5], "gen_len": key[6],
                "label": f"{key[1]} {key[3]} on {key[2]} ({key[4]}, prompt {key[5]}, {key[6]} tokens)",
                "points": []})
            series["points"].append([p.get("batch"), value])
    for series in groups.values():
        series["points"].sort(key=lambda point: point[0])
    return list(groups.values())
