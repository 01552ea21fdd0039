"""Rows and manifests shaped like the engine writes them, for tests of the result tools."""

from __future__ import annotations

from typing import Any

from xmfu.harness.results.schema.comparability import comparability_fields, comparability_key
from xmfu.harness.results.statistics.summary import summarize

MANIFEST = {"run_id": "r", "created": "2026-11-23T00:00:00.000000Z", "xmfu_version": "0", "git_sha": None,
            "argv": [], "overrides": [], "comparability_key": "k"}


def time_summary(samples: list[float]) -> dict[str, Any]:
    """The engine's statistics of these samples (stats.summarize), so `xmfu validate` re-derives them."""
    return summarize(samples).as_dict()


def samples_of(row: dict[str, Any]) -> list[float]:
    """Samples that give the row's time statistics: every row here is made from three samples, whose summary is
    fixed by their min, median and max."""
    t = row.get("time_s") or {}
    if not t:
        return []
    return [t["min"], t["median"], t["max"]] if t["n"] == 3 else [t["median"]] * t["n"]


PROTOCOL = {"protocol": "xmfu.timing/1", "statistic": "median", "cold_cache": False, "sustained": False}


def keyed(row: dict[str, Any], protocol: dict[str, Any] | None = None) -> dict[str, Any]:
    """The row with the comparability fields and key the engine's runner gives it (comparability.py), made from
    its workload, params, dtype and FLOP convention: `xmfu validate` re-derives the key from them."""
    fields = comparability_fields(row["workload"], row["params"], row["dtype"], row["flop_convention"],
                                  protocol if protocol is not None else (row.get("comparability") or {}).get(
                                      "protocol", PROTOCOL))
    return {**row, "comparability": fields, "comparability_key": comparability_key(fields)}


# The declared shape of a row's sections (results/schema/parts.py), for tests that set a few fields of one: a
# reader decodes every row into its record, so a section must carry its required fields.
TIMER = {"name": "perf_counter", "inner": 1, "stop": "CI target met"}
WINDOW = {"index": 0, "start_s": 0.0, "median_s": 1e-3, "n": 3, "tflops": None, "mean_sm_clock_mhz": None,
          "mean_power_w": None}
STEADY = {"window_s": 1.0, "tolerance": 0.02, "windows": [WINDOW], "reached_after_s": 0.0, "reached": True,
          "first_window": WINDOW, "steady_window": WINDOW, "first_vs_steady_time_change": 0.0}


def sections(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with its timer and steady state completed to their declared shape (what is given wins)."""
    out = dict(fields)
    if isinstance(out.get("timer"), dict):
        out["timer"] = {**TIMER, **out["timer"]}
    if isinstance(out.get("steady_state"), dict):
        out["steady_state"] = {**STEADY, **out["steady_state"]}
    return out


def valid_row(samples: list[float] | None = None, flops: float = 2e9, peak: float | None = 1.0,
              **fields: Any) -> dict[str, Any]:
    """An ok, timed row whose derived figures agree (tflops = flops / median, mfu = tflops / peak)."""
    samples = samples if samples is not None else [1e-3, 1.1e-3, 0.9e-3]
    t = time_summary(samples)
    tflops = flops / t["median"] / 1e12
    row = {"run_id": "r", "case_id": "c1", "workload": "matmul", "backend": "torch", "platform": "cpu",
           "device": "cpu", "dtype": "fp32", "params": {"m": 1}, "status": "ok", "reason": None, "flops": flops,
           "flop_convention": "matmul-2mnk/1", "bytes": 1.0, "time_s": t, "tflops": tflops, "peak_tflops": peak,
           "peak_source": "s" if peak else None, "mfu": tflops / peak if peak else None, "mfu_vs_achievable": None,
           "timing_valid": True}
    row.update(sections(fields))
    return keyed(row) if "comparability_key" not in fields else row


def untimed_row(status: str = "skipped", **fields: Any) -> dict[str, Any]:
    row = valid_row(status=status, **{"time_s": None, "tflops": None, "mfu": None, "reason": f"{status} here",
                                      **fields})
    return {**row, "tflops_ci95": None}


def ci95(row: dict[str, Any]) -> dict[str, Any]:
    """The TFLOP/s interval the engine writes with a row (harness/engine/metrics.py: FLOPs / the time's CI)."""
    t = row.get("time_s")
    if row.get("tflops") is not None and t:
        row["tflops_ci95"] = [row["flops"] / t["ci95_high"] / 1e12, row["flops"] / t["ci95_low"] / 1e12]
    else:
        row["tflops_ci95"] = None
    return row


def matmul_row(m: int, n: int, k: int, backend: str = "torch", dtype: str = "bf16", **fields: Any) -> dict[str, Any]:
    median = 2 * m * n * k / 50e12  # 50 TFLOP/s, +-5%
    row = valid_row([median * 0.95, median, median * 1.05], flops=2.0 * m * n * k, peak=100.0, workload="matmul",
                    backend=backend, dtype=dtype, case_id=f"matmul-{dtype}-{m}x{n}x{k}-NN", platform="cuda",
                    device="GPU A", params={"m": m, "n": n, "k": k, "transpose_a": False, "transpose_b": False},
                    **fields)
    return ci95(row)


def attention_row(seq: int, causal: bool, mode: str, backend: str = "torch_sdpa", **fields: Any) -> dict[str, Any]:
    flops = 4.0 * seq * seq * 64 * 8 * (0.5 if causal else 1.0) * (3.5 if mode == "fwd_bwd" else 1.0)
    median = flops / 20e12
    params = {"batch": 1, "heads": 8, "head_dim": 64, "seq_q": seq, "seq_kv": seq, "causal": causal, "mode": mode}
    case = f"attention-bf16-{mode}-q{seq}-k{seq}-{'causal' if causal else 'full'}"
    row = valid_row([median * 0.98, median, median * 1.02], flops=flops, peak=100.0, workload="attention",
                    backend=backend, dtype="bf16", case_id=case, platform="cuda", device="GPU A", params=params,
                    **fields)
    return ci95(row)


def collectives_row(size: int, ranks: int = 2, backend: str = "torch_dist", **fields: Any) -> dict[str, Any]:
    median = 1e-5 + size / 10e9
    bw = size / median / 1e9
    params = {"op": "all_reduce", "in_place": True, "mode": "throughput", "size_bytes": size}
    row = valid_row([median * 0.9, median, median * 1.1], flops=0.0, peak=100.0, workload="collectives",
                    backend=backend, dtype="fp32", case_id=f"all_reduce-fp32-{size}B-inplace-throughput",
                    platform="cuda", device="GPU A", params=params, tflops=None, mfu=None, algbw_gbps=bw,
                    busbw_gbps=bw * 2 * (ranks - 1) / ranks, size_bytes_actual=size, ranks=ranks,
                    mfu_reason="not a compute workload: see the bandwidth figures", **fields)
    return ci95(row)


def write_bundle(folder: Any, run_id: str, rows: list[dict[str, Any]], created: str = "2026-11-23T00:00:00.000000Z",
                 environment: dict[str, Any] | None = None, telemetry: list[dict[str, Any]] | None = None) -> Any:
    """A valid bundle of these rows (their run id set to `run_id`), read back through the validator."""
    from xmfu.harness.results.bundle.validator import load_bundle
    from xmfu.harness.results.bundle.writer import BundleWriter

    writer = BundleWriter(folder / run_id, {**MANIFEST, "run_id": run_id, "created": created}, "",
                          environment or {"driver": "570", "packages": {"torch": "2.13.0"}})
    for row in rows:
        row = {**row, "run_id": run_id}
        writer.append(row, {"case_id": row["case_id"], "backend": row["backend"], "samples": samples_of(row)})
    if telemetry:
        writer.append_telemetry(rows[0]["case_id"], telemetry)
    writer.finalize("complete")
    loaded = load_bundle(folder / run_id)
    assert not loaded.problems, loaded.problems
    return loaded.bundle
