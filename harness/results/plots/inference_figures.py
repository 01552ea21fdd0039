"""The inference series a report plots, from bundle rows: decode throughput and model bandwidth utilisation
against batch size, one series per backend, device and shape. Pure: rows in, plain data out (the report draws)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from xmfu.harness.results.schema.row import Row

# metric -> (the figure of a decode row, or None where it has none; axis label)
METRICS: dict[str, tuple[Callable[[Row], float | None], str]] = {
    "decode_tokens_per_s": (lambda r: (r.throughput or {}).get("generated_tokens_per_s"),
                            "generated tokens/s (all sequences)"),
    "mbu": (lambda r: r.mbu, "MBU (bytes per step / step time / peak memory bandwidth)"),
}


def plotted(row: Row) -> bool:
    return (row.workload == "inference" and row.params.get("phase") == "decode" and row.status == "ok"
            and row.timing_valid)


def inference_series(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """One series per (metric, backend, device, dtype, model, prompt_len, gen_len) over the ok, timed decode rows:
    {"metric", "y_label", "x_label": "batch", "backend", "device", "dtype", "model", "prompt_len", "gen_len",
    "label", "points": [[batch, value], ...] sorted by batch}. Rows whose value is null (e.g. MBU on a device
    without a known peak bandwidth) are left out; a series with no point is not returned. With several rows
    for one batch (repeated bundles) every point is kept, in input order."""
    groups: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        if not plotted(row):
            continue
        p = row.params
        for metric, (figure, y_label) in METRICS.items():
            value = figure(row)
            if value is None:
                continue
            key = (metric, row.backend, row.device, row.dtype, p.get("name"), p.get("prompt_len"), p.get("gen_len"))
            series = groups.setdefault(key, {
                "metric": metric, "y_label": y_label, "x_label": "batch", "backend": key[1], "device": key[2],
                "dtype": key[3], "model": key[4], "prompt_len": key[5], "gen_len": key[6],
                "label": f"{key[1]} {key[3]} on {key[2]} ({key[4]}, prompt {key[5]}, {key[6]} tokens)",
                "points": []})
            series["points"].append([p.get("batch"), value])
    for series in groups.values():
        series["points"].sort(key=lambda point: point[0])
    return list(groups.values())
