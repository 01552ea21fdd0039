"""Rows and manifests shaped like the engine writes them, for tests of the result tools."""

from __future__ import annotations

from typing import Any

import numpy as np

MANIFEST = {"run_id": "r", "created": "2026-11-23T00:00:00.000000Z", "xmfu_version": "0", "git_sha": None,
            "argv": [], "overrides": [], "comparability_key": "k"}


def time_summary(samples: list[float]) -> dict[str, Any]:
    x = np.asarray(samples, dtype=np.float64)
    median = float(np.median(x))
    return {"n": int(x.size), "median": median, "mean": float(x.mean()), "min": float(x.min()), "max": float(x.max()),
            "p10": float(np.percentile(x, 10)), "p90": float(np.percentile(x, 90)), "p99": float(np.percentile(x, 99)),
            "ci95_low": float(x.min()), "ci95_high": float(x.max()), "cv": 0.0}


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
           "timing_valid": True, "comparability_key": "k"}
    row.update(fields)
    return row


def untimed_row(status: str = "skipped", **fields: Any) -> dict[str, Any]:
    row = valid_row(status=status, time_s=None, tflops=None, mfu=None, reason=f"{status} here", **fields)
    return row
