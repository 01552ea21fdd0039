"""`xmfu compare`: matching cases of several bundles side by side, with a ratio, its CI and a verdict.

Rows match on (case id, backend). Two rows are compared only when their comparability keys agree; otherwise
the comparison is refused with the fields that differ, unless the caller allows it (then the row is marked).
Each bundle is compared with the baseline bundle (the first, or `--baseline`).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.results.reader import Bundle
from harness.results.stats import independent_speedup

ENV_FIELDS = (  # (label, path in environment.json) whose differences can explain different numbers
    ("driver", ("driver",)), ("torch cuda", ("torch", "cuda")), ("torch hip", ("torch", "hip")),
    ("nccl", ("nccl", "version")), ("power limit W", ("telemetry", "power_limit_w")),
    ("max SM clock MHz", ("telemetry", "max_sm_clock_mhz")), ("kernel", ("host", "kernel")),
)


class Incomparable(Exception):
    """Rows that share a case id and backend but not a comparability key."""


@dataclass
class Comparison:
    baseline: str  # run id
    rows: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    env_diff: list[dict[str, Any]] = field(default_factory=list)


def _timed(row: dict[str, Any]) -> bool:
    """An ok row with a time (a backend checked but not timed, e.g. Triton's interpreter, has none)."""
    return row["status"] == "ok" and bool(row.get("time_s"))


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return row["case_id"], row["backend"]


def differing_fields(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Which parts of the comparability key differ (workload spec, dtype, FLOP convention, protocol)."""
    fa, fb = a.get("comparability") or {}, b.get("comparability") or {}
    if not fa or not fb:
        return ["comparability key (one bundle predates the recorded key fields)"]
    out = []
    for name in sorted(set(fa) | set(fb)):
        va, vb = fa.get(name), fb.get(name)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += [f"{name}.{k}: {va.get(k)!r} vs {vb.get(k)!r}" for k in sorted(set(va) | set(vb))
                    if va.get(k) != vb.get(k)]
        elif va != vb:
            out.append(f"{name}: {va!r} vs {vb!r}")
    return out


def _dig(data: dict[str, Any], path: Sequence[str]) -> Any:
    for part in path:
        data = data.get(part) if isinstance(data, dict) else None
    return data


def environment_diff(envs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Conditions that differ between bundles: versions, driver, clocks, power limits, variables."""
    names = list(envs)
    out = []

    def add(label: str, values: dict[str, Any]) -> None:
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            out.append({"field": label, **values})

    for label, path in ENV_FIELDS:
        add(label, {n: _dig(envs[n], path) for n in names})
    for package in sorted({p for e in envs.values() for p in (e.get("packages") or {})}):
        add(f"package {package}", {n: (envs[n].get("packages") or {}).get(package) for n in names})
    add("device", {n: [d.get("name") for d in envs[n].get("devices", [])] for n in names})
    for var in sorted({v for e in envs.values() for v in (e.get("env") or {})}):
        add(f"env {var}", {n: (envs[n].get("env") or {}).get(var) for n in names})
    return out


def compare(bundles: Sequence[Bundle], envs: Sequence[dict[str, Any]], baseline: int = 0,
            allow_incomparable: bool = False, margin: float = 0.02) -> Comparison:
    base = bundles[baseline]
    base_rows = {_key(r): r for r in base.cases}
    base_samples = {(s["case_id"], s["backend"]): s["samples"] for s in base.samples}
    result = Comparison(base.manifest["run_id"])
    for i, other in enumerate(bundles):
        if i == baseline:
            continue
        samples = {(s["case_id"], s["backend"]): s["samples"] for s in other.samples}
        for row in other.cases:
            ref = base_rows.get(_key(row))
            if ref is None or not (_timed(ref) and _timed(row)):
                continue
            diff = [] if ref["comparability_key"] == row["comparability_key"] else differing_fields(ref, row)
            if diff and not allow_incomparable:
                result.refused.append({"case_id": row["case_id"], "backend": row["backend"],
                                       "run_id": other.manifest["run_id"], "differs": diff})
                continue
            s = independent_speedup(base.manifest["run_id"], base_samples[_key(row)], samples[_key(row)], margin)
            result.rows.append({
                "case_id": row["case_id"], "backend": row["backend"], "baseline_run": base.manifest["run_id"],
                "run": other.manifest["run_id"], "baseline_median_s": ref["time_s"]["median"],
                "median_s": row["time_s"]["median"], "speedup": s.value, "ci95_low": s.ci95_low,
                "ci95_high": s.ci95_high, "verdict": s.verdict, "mfu": row.get("mfu"),
                "baseline_mfu": ref.get("mfu"), "incomparable": diff or None,
                "timing_valid": bool(row.get("timing_valid") and ref.get("timing_valid")),
            })
    result.env_diff = environment_diff({b.manifest["run_id"]: e for b, e in zip(bundles, envs, strict=True)})
    return result


COLUMNS = ("case_id", "backend", "run", "baseline_median_s", "median_s", "speedup", "ci95_low", "ci95_high",
           "verdict", "mfu", "baseline_mfu")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def render(result: Comparison, fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"baseline": result.baseline, "rows": result.rows, "refused": result.refused,
                           "environment_diff": result.env_diff}, indent=2, default=str)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=[*COLUMNS, "incomparable"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result.rows)
        return out.getvalue()
    rows = [[_cell(r.get(c)) + (" (INCOMPARABLE)" if c == "verdict" and r.get("incomparable") else "")
             for c in COLUMNS] for r in result.rows]
    if fmt == "markdown":
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    else:
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    lines.append(f"speedup = baseline time / time (baseline run {result.baseline}); 95% CI by bootstrap")
    for r in result.refused:
        lines.append(f"refused {r['case_id']} {r['backend']} ({r['run_id']}): " + "; ".join(r["differs"]))
    for d in result.env_diff:
        lines.append(f"environment differs: {d['field']}: " + ", ".join(f"{k}={v}" for k, v in d.items()
                                                                          if k != "field"))
    return "\n".join(lines)
