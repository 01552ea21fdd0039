"""History for nightly jobs: a Parquet store of bundle rows, trends over time, and regression checks.

The store is a folder with one Parquet file per run id: appending is idempotent (a run already stored is
skipped) and each file is written to a temporary name and renamed, under an exclusive lock, so two jobs
appending at once cannot corrupt it. pandas (or any Parquet reader) reads the folder as one table.
"""

from __future__ import annotations

import fcntl
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.results.reader import Bundle
from harness.results.schema import RUN_ID

SERIES_KEY = ("workload", "case_id", "backend", "device", "dtype", "comparability_key")  # never mix meanings
COLUMNS = {  # column -> how to read it from a row (bundle rows are nested; the store is flat)
    "median_s": lambda r: (r.get("time_s") or {}).get("median"),
    "ci95_low_s": lambda r: (r.get("time_s") or {}).get("ci95_low"),
    "ci95_high_s": lambda r: (r.get("time_s") or {}).get("ci95_high"),
    "cv": lambda r: (r.get("time_s") or {}).get("cv"),
    "tflops": lambda r: r.get("tflops"), "mfu": lambda r: r.get("mfu"),
    "busbw_gbps": lambda r: r.get("busbw_gbps"),
    "tokens_per_s": lambda r: (r.get("throughput") or {}).get("tokens_per_s"),
}


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise RuntimeError("the history store needs pyarrow: pip install 'xmfu[history]'") from None
    return pyarrow


def flatten(bundle: Bundle, environment: dict[str, Any]) -> list[dict[str, Any]]:
    m = bundle.manifest
    packages = environment.get("packages") or {}
    out = []
    for r in bundle.cases:
        row = {"run_id": m["run_id"], "created": m["created"], "git_sha": m.get("git_sha") or "",
               "xmfu_version": m.get("xmfu_version") or "", "platform": r["platform"], "device": r["device"],
               "workload": r["workload"], "case_id": r["case_id"], "backend": r["backend"], "dtype": r["dtype"],
               "status": r["status"], "timing_valid": bool(r.get("timing_valid")),
               "comparability_key": r["comparability_key"], "torch": packages.get("torch") or "",
               "jax": packages.get("jax") or "", "driver": environment.get("driver") or ""}
        row.update({name: read(r) for name, read in COLUMNS.items()})
        out.append(row)
    return out


@contextmanager
def locked(store: Path) -> Iterator[None]:
    store.mkdir(parents=True, exist_ok=True)
    with (store / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)




def store_file(store: Path, run_id: Any) -> Path:
    """Where a run lives in the store; refuses any run id that would name a file outside it."""
    if not isinstance(run_id, str) or not RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} is not a plain name (letters, digits, '.', '_', '-'; 128 at most)")
    target = (store / f"{run_id}.parquet").resolve()
    if target.parent != store.resolve():
        raise ValueError(f"run id {run_id!r} would write outside the store {store}")
    return target


def add(store: Path, bundle: Bundle, environment: dict[str, Any]) -> bool:
    """Append one bundle; False when its run id is already stored (idempotent)."""
    pa = _pyarrow()
    target = store_file(store, bundle.manifest.get("run_id"))
    with locked(store):
        if target.exists():
            return False
        table = pa.Table.from_pylist(flatten(bundle, environment))
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        pa.parquet.write_table(table, tmp)
        os.replace(tmp, target)
    return True


def load(store: Path) -> list[dict[str, Any]]:
    pa = _pyarrow()
    files = sorted(store.glob("*.parquet"))
    if not files:
        return []
    return pa.concat_tables([pa.parquet.read_table(f) for f in files], promote_options="default").to_pylist()


def series(rows: Sequence[dict[str, Any]], metric: str) -> dict[tuple, list[tuple[str, float]]]:
    """(workload, case, backend, device, dtype) -> [(created, value)] in time order, ok rows only."""
    out: dict[tuple, list[tuple[str, float]]] = defaultdict(list)
    for r in rows:
        if r["status"] == "ok" and r.get(metric) is not None and r.get("timing_valid", True):
            out[tuple(r[k] for k in SERIES_KEY)].append((r["created"], float(r[metric])))
    return {k: sorted(v) for k, v in out.items()}


def gap(rows: Sequence[dict[str, Any]], metric: str, numerator: str, denominator: str) -> list[dict[str, Any]]:
    """metric(numerator platform or device) / metric(denominator) on matching cases, per day."""
    by_day: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["status"] != "ok" or r.get(metric) is None:
            continue
        side = next((s for s in (numerator, denominator) if s in (r["platform"], r["device"])), None)
        if side:
            day = datetime.fromisoformat(r["created"].replace("Z", "+00:00")).date().isoformat()
            by_day[(day, r["workload"], r["case_id"], r["dtype"])][side].append(float(r[metric]))
    out = []
    for (day, workload, case_id, dtype), sides in sorted(by_day.items()):
        if sides[numerator] and sides[denominator]:
            ratio = statistics.fmean(sides[numerator]) / statistics.fmean(sides[denominator])
            out.append({"day": day, "workload": workload, "case_id": case_id, "dtype": dtype, "ratio": ratio})
    return out


def check(rows: Sequence[dict[str, Any]], metric: str, window: int = 7, sigmas: float = 3.0,
          min_change: float = 0.02) -> list[dict[str, Any]]:
    """Series whose latest value moved more than the noise of its rolling baseline.

    Baseline = median of the previous `window` values; noise = 1.4826 x their median absolute deviation (a
    robust standard deviation); flagged when |latest - baseline| > max(sigmas x noise, min_change x baseline).
    """
    flagged = []
    for key, points in series(rows, metric).items():
        if len(points) < 3:
            continue
        values = [v for _, v in points]
        history, latest = values[-(window + 1):-1], values[-1]
        base = statistics.median(history)
        mad = statistics.median(abs(v - base) for v in history)
        limit = max(sigmas * 1.4826 * mad, min_change * abs(base))
        if abs(latest - base) > limit:
            flagged.append({**dict(zip(SERIES_KEY, key, strict=True)), "metric": metric, "latest": latest,
                            "baseline": base, "change": latest / base - 1 if base else None, "limit": limit,
                            "at": points[-1][0]})
    return flagged


def run_to_run_noise(rows: Sequence[dict[str, Any]], window: int = 10,
                     minimum: int = 3) -> Callable[[dict[str, Any]], tuple[float, int] | None]:
    """For `xmfu compare --noise-from STORE`: a bundle row -> (run-to-run standard deviation of log median
    time over the series' last `window` runs, runs used), or None with fewer than `minimum` runs. The
    deviation is 1.4826 x the median absolute deviation (a robust standard deviation: one outlier run does
    not set the noise)."""
    found = series(rows, "median_s")

    def noise(row: dict[str, Any]) -> tuple[float, int] | None:
        points = found.get(tuple(row.get(k) for k in SERIES_KEY), [])[-window:]
        if len(points) < minimum:
            return None
        logs = [math.log(v) for _, v in points if v > 0]
        center = statistics.median(logs)
        return 1.4826 * statistics.median(abs(v - center) for v in logs), len(logs)

    return noise
