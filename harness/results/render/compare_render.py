"""`xmfu compare` output: one table, CSV, JSON or markdown, each with the same columns, costs included."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from xmfu.harness.results.analysis.compare import Comparison

COLUMNS = ("case_id", "backend", "run", "baseline_median_s", "median_s", "speedup", "ci95_low", "ci95_high",
           "verdict", "variance_source", "mfu", "baseline_mfu")
COST_COLUMNS = ("usd_per_million_tokens", "baseline_usd_per_million_tokens", "usd_per_realized_pflop_hour",
                "baseline_usd_per_realized_pflop_hour", "break_even_price_ratio", "cost_per_work_ratio")
# Inference rows' cost per token (harness/results/analysis/cost.py PER_MILLION), shown where a row carries one: training
# and kernel comparisons keep their columns as they were
INFERENCE_COST_COLUMNS = ("usd_per_million_prompt_tokens", "baseline_usd_per_million_prompt_tokens",
                          "usd_per_million_generated_tokens", "baseline_usd_per_million_generated_tokens")

# Energy (the rows' `energy` sections, point figures) where any line has them; its price where one was given
ENERGY_COLUMNS = ("j_per_token", "baseline_j_per_token", "energy_verdict", "tflops_per_w", "baseline_tflops_per_w")
ENERGY_COST_COLUMNS = ("usd_energy_per_million_tokens", "baseline_usd_energy_per_million_tokens",
                       "usd_energy_per_realized_pflop_hour", "baseline_usd_energy_per_realized_pflop_hour")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its cost figures lifted to columns and its flags folded into the verdict."""
    out = dict(row)
    cost, base = row.get("cost") or {}, row.get("baseline_cost") or {}
    out["usd_per_million_tokens"] = cost.get("usd_per_million_tokens")
    out["usd_per_million_prompt_tokens"] = cost.get("usd_per_million_prompt_tokens")  # inference prefill rows
    out["usd_per_million_generated_tokens"] = cost.get("usd_per_million_generated_tokens")  # decode rows
    out["baseline_usd_per_million_prompt_tokens"] = base.get("usd_per_million_prompt_tokens")
    out["baseline_usd_per_million_generated_tokens"] = base.get("usd_per_million_generated_tokens")
    out["baseline_usd_per_million_tokens"] = base.get("usd_per_million_tokens")
    out["usd_per_realized_pflop_hour"] = cost.get("usd_per_realized_pflop_hour")
    out["baseline_usd_per_realized_pflop_hour"] = base.get("usd_per_realized_pflop_hour")
    for side, prefix in (("energy", ""), ("baseline_energy", "baseline_")):
        out.update({prefix + k: (row.get(side) or {}).get(k) for k in ("j_per_token", "tflops_per_w")})
    for c in ENERGY_COST_COLUMNS:
        out[c] = (base if c.startswith("baseline_") else cost).get(c.removeprefix("baseline_"))
    flags = [row.get("verdict_reason"), "INCOMPARABLE" if row.get("incomparable") else None,
             "CONTENDED" if row.get("contended") and row.get("verdict_reason") != "contended" else None]
    out["verdict"] = row["verdict"] + "".join(f" ({f})" for f in flags if f)
    return out


def _columns(result: Comparison, flat: list[dict[str, Any]]) -> tuple[str, ...]:
    """The table's columns: the costs where a row is priced, the energy figures where a row (`_flat`) has one."""
    priced = any(r.get("cost") for r in result.rows)
    inference = tuple(c for c in INFERENCE_COST_COLUMNS
                      if any((r.get("baseline_cost" if c.startswith("baseline_") else "cost") or {}).get(
                          c.removeprefix("baseline_")) is not None for r in result.rows))
    extra = tuple(c for c in ENERGY_COLUMNS + ENERGY_COST_COLUMNS if any(f.get(c) is not None for f in flat))
    return COLUMNS + (COST_COLUMNS + inference if priced else ()) + extra


def _notes(result: Comparison) -> list[str]:
    lines = [f"speedup = baseline time / time (baseline {result.baseline}); 95% CI; the variance each verdict "
             "used is in variance_source"]
    for r in result.refused:
        lines.append(f"refused {r['case_id']} {r['backend']} ({r['run_id']}): " + "; ".join(r["differs"]))
    lines += [f"no match: {u}" for u in result.unmatched]
    for r in result.rows:
        for c in r.get("contended") or []:
            lines.append(f"contended {r['case_id']} {r['backend']}: {c}")
    for d in result.env_diff:
        lines.append(f"environment differs: {d['field']}: " + ", ".join(f"{k}={v}" for k, v in d.items()
                                                                          if k != "field"))
    return lines


def render(result: Comparison, fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"baseline": result.baseline, "rows": result.rows, "refused": result.refused,
                           "unmatched": result.unmatched, "environment_diff": result.env_diff}, indent=2,
                          default=str, allow_nan=False)
    flat = [_flat(r) for r in result.rows]
    columns = _columns(result, flat)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=[*columns, "incomparable", "contended"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(flat)
        return out.getvalue()
    cells = [[_cell(r.get(c)) for c in columns] for r in flat]
    if fmt == "markdown":
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in cells]
        lines += ["", *(f"- {n}" for n in _notes(result))]
        return "\n".join(lines)
    widths = [max(len(c), *map(len, cells_of)) for c, cells_of in zip(columns, zip(*cells, strict=True), strict=True)] \
        if cells else [len(c) for c in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join([*lines, *_notes(result)])
