"""What a distributed step's row adds once it is timed: its scaling efficiency against the single-device step
of the same run, and what its communication costs (bytes, bandwidth, exposed time, overlap), each figure with
the method that produced it. A figure that could not be measured is null with the reason, never a guess.

Exposed communication is measured two ways, both recorded: `comm_exposed_s` = the step's time minus the same
step's with its collectives removed (the `no_comm` variant), and `comm_total_s` = the step's collectives timed
alone (the `comm_alone` variant). overlap = 1 - exposed/total: the share of the collectives hidden behind
compute (workloads/transformer/parallel.py `overlap`, clamped into [0, 1] with a note).
"""

from __future__ import annotations

from typing import Any

from xmfu.workloads.transformer import parallel

EXPOSED_METHOD = {
    ("torch", "ddp"): "step time - the same step under DDP.no_sync() (no gradient all-reduce)",
    ("torch", "fsdp"): ("step time - the same per-rank work without FSDP: the unsharded model in the all-gathered "
                        "dtype on this rank's batch, AdamW on tensors of this rank's shard shapes"),
    ("jax", "dp"): "step time - the same per-device step under shard_map with no collective",
    ("jax", "fsdp"): ("step time - the same per-device step under shard_map with no collective (whole parameters, "
                      "this device's shard updated)"),
    ("jax", "ep"): ("step time - the same per-device step under shard_map with every exchange the identity and no "
                    "collective (each device runs its local experts on its own assignments, in the same buffer "
                    "shapes)"),
}
TOTAL_METHOD = "the step's collectives timed alone with the collectives workload's machinery, at the step's sizes"


def _framework(row: dict[str, Any]) -> str:
    return "jax" if row["backend"].startswith("jax") else "torch"


def _median(entry: dict[str, Any] | None) -> float | None:
    return ((entry or {}).get("time_s") or {}).get("median")


def scaling(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """MFU per device of this row over the single-device step's (same backend, model, batch setting, run)."""
    p = row["params"]
    base_id = row["case_id"].removesuffix(f"-{p['parallel']}-{p['scaling']}")
    base = next((r for r in reversed(rows) if r["case_id"] == base_id and r["backend"] == row["backend"]
                 and r["status"] == "ok" and r.get("timing_valid") and r.get("tflops")), None)
    if base is None or not row.get("tflops"):
        return {"scaling_efficiency": None,
                "scaling_note": f"not measured: no timed single-device row {base_id} of {row['backend']} in this run"}
    efficiency = parallel.scaling_efficiency(row["tflops"], base["tflops"])
    out = {"scaling_efficiency": efficiency, "scaling_credible": efficiency <= 1,
           "scaling_baseline": {"case_id": base_id, "tflops": base["tflops"], "mfu": base.get("mfu"),
                                "median_s": base["time_s"]["median"], "same_per_device_batch": p["scaling"] == "weak"}}
    if efficiency > 1:
        out["scaling_note"] = not_credible(efficiency)
    return out


def not_credible(efficiency: float) -> str:
    """Why a scaling efficiency above 1 is flagged: each device would have done more per second inside the group
    than the single device did alone, beside communication it did not have to do (issue 30: 16.7 under Hydra's
    submitit_local, where the single-device step ran with every task's threads oversubscribing the cores)."""
    return (f"not credible: scaling efficiency {efficiency:.3g} > 1 means each device ran faster in the group than "
            "the single device alone; the usual cause is a baseline measured under other conditions (oversubscribed "
            "threads, another tenant: see both rows' contention), not the hardware. Under strong scaling a share that "
            "fits a cache the whole did not can run faster; measure again before relying on it")


def _exposed(row: dict[str, Any], step: float) -> tuple[float | None, str]:
    key = (_framework(row), row["params"]["parallel"])
    no_comm = (row.get("variants") or {}).get("no_comm")
    median = _median(no_comm)
    if median is None:
        why = (no_comm or {}).get("error") or row["notes"].get("no_comm") or "the no-communication variant did not run"
        return None, f"not measured: {why}"
    return step - median, EXPOSED_METHOD.get(key, "step time - the step without its collectives")


def communication(row: dict[str, Any]) -> dict[str, Any]:
    """Bytes each rank sends per step (torch: the strategy's schedule as the framework issues it; JAX: the
    collectives XLA compiled, the textbook schedule's figure beside it), the bandwidth the collectives reach alone, the
    exposed and total communication time and the overlap, with their methods."""
    n, notes, step = row["params"]["world_size"], row["notes"], row["time_s"]["median"]
    nominal = notes.get("comm") or {}
    out: dict[str, Any] = {"comm_bytes_per_rank": nominal.get("bytes_per_rank"),
                           "comm_bytes_formula": nominal.get("formula"), "comm_exposed_s": None,
                           "comm_total_s": _median((row.get("variants") or {}).get("comm_alone")),
                           "comm_achieved_gbps": None, "overlap": None}
    exposed, exposed_method = _exposed(row, step)
    out["comm_exposed_s"] = exposed
    detail: dict[str, Any] = {"exposed_method": exposed_method, "total_method": TOTAL_METHOD,
                              "collectives": (notes.get("comm_alone_collectives") or {}).get("source")}
    textbook = nominal.get("textbook")  # JAX: the figure is the compiled program's; the schedule's, for reference
    if textbook:
        detail.update({"textbook_bytes_per_rank": textbook.get("bytes_per_rank"),
                       "textbook_formula": textbook.get("formula")})
    total = out["comm_total_s"]
    if n < 2:
        detail["note"] = "one device: nothing crosses a link, so no bandwidth or overlap"
    elif total and exposed is not None:
        out["comm_achieved_gbps"] = out["comm_bytes_per_rank"] / total / 1e9 if out["comm_bytes_per_rank"] else None
        out["overlap"], note = parallel.overlap(exposed, total)
        detail.update({"overlap_raw": 1 - exposed / total, "clamped": note is not None})
        if note:
            detail["note"] = note
    elif total:
        out["comm_achieved_gbps"] = out["comm_bytes_per_rank"] / total / 1e9 if out["comm_bytes_per_rank"] else None
        detail["note"] = "overlap not measured: no exposed time"
    out["comm"] = detail
    return out


def derive(row: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The transformer workload's derived figures (the engine's WorkloadDef.derive hook)."""
    p = row.get("params") or {}
    if not p.get("parallel") or row["status"] != "ok" or not row.get("time_s"):
        return {}
    out = {"flops_global": row["flops"] * p["world_size"],
           "peak_memory_per_rank_bytes": row["notes"].get("per_rank_peak_memory_bytes")}
    return {**out, **scaling(row, rows), **communication(row)}
