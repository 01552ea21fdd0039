"""Run-level collective figures: peak busbw, busbw at fixed sizes, a latency-bandwidth fit, rank skew.

Fixed reference sizes, not nccl-tests' "average bus bandwidth" over whatever range was swept, so two runs
with different sweeps still compare.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

REFERENCE_SIZES = {"1MiB": 2**20, "64MiB": 2**26, "1GiB": 2**30}


def alpha_beta(sizes: list[float], seconds: list[float], factor: float) -> dict[str, float] | None:
    """Least-squares fit of t = α + S·F/β (Hockney's model with nccl-tests' bus factor). Half of β is
    reached at S = α·β/F."""
    if len(sizes) < 3 or not factor:
        return None
    x = np.asarray(sizes, dtype=np.float64) * factor
    slope, alpha = np.polyfit(x, np.asarray(seconds, dtype=np.float64), 1)
    if slope <= 0:
        return None
    beta = 1 / slope
    fit = {"alpha_us": alpha * 1e6, "beta_gbps": beta / 1e9, "half_bandwidth_bytes": max(alpha, 0) * beta / factor}
    if alpha < 0:  # time is not affine in size over this sweep (cache effects, protocol switches)
        fit["note"] = "alpha < 0: t is not affine in S over this sweep; the fit describes it poorly"
    return fit


def _link_gbps(entry_id: str | None) -> float | None:
    from xmfu.harness.machine.peaks import load_table

    entry = next((e for e in load_table()["devices"] if e["id"] == entry_id), None)
    return entry.get("link_gbps") if entry else None


def _series(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["status"] == "ok" and r.get("time_s"):
            p = r["params"]
            groups[(r["backend"], p["op"], "inplace" if p["in_place"] else "outofplace", p["mode"])].append(r)
    return groups


def _one(rows: list[dict[str, Any]]) -> dict[str, Any]:
    rows = sorted(rows, key=lambda r: r["size_bytes_actual"])
    out: dict[str, Any] = {"ranks": rows[0].get("ranks") or rows[0]["notes"].get("ranks")}
    if rows[0]["params"]["mode"] == "latency":
        out["latency_us_at_smallest"] = {k: rows[0]["time_s"][k] * 1e6 for k in ("min", "median", "p90", "p99",
                                                                                  "max")}
    bus = [r for r in rows if r.get("busbw_gbps") is not None]
    if bus:
        best = max(bus, key=lambda r: r["busbw_gbps"])
        out["peak_busbw_gbps"], out["peak_at_bytes"] = best["busbw_gbps"], best["size_bytes_actual"]
        exact = {name: r["busbw_gbps"] for r in bus for name, size in REFERENCE_SIZES.items()
                 if r["params"]["size_bytes"] == size}
        out["busbw_at_gbps"] = exact
        fit = alpha_beta([r["size_bytes_actual"] for r in bus], [r["time_s"]["median"] for r in bus],
                         bus[0]["bus_factor"])
        if fit:
            out["fit"] = fit
    else:
        out["busbw"] = "not applicable (one rank)"
    skews = [r["rank_skew"] for r in rows if r.get("rank_skew")]
    if skews:
        out["max_rank_skew"] = max(skews)
    link = _link_gbps(rows[0].get("peak_entry"))
    if bus:
        out["link_gbps"] = link
        out["peak_busbw_of_link"] = out["peak_busbw_gbps"] / link if link else "link bandwidth not in the peak table"
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"/".join(key): _one(group) for key, group in sorted(_series(rows).items())}
