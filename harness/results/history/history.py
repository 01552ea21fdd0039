"""History for nightly jobs: a Parquet store of bundle rows, trends over time, and regression checks.

The store is a folder with one Parquet file per run id: appending is idempotent (a run already stored is
skipped) and each file is written to a temporary name and renamed, under an exclusive lock, so two jobs
appending at once cannot corrupt it. pandas (or any Parquet reader) reads the folder as one table, because
every file has the one Arrow schema below: before it, a file took its column types from what its rows held
(a run whose tflops were all null wrote a null-typed column), and `pandas.read_parquet(store)` then failed on
a store mixing workloads. Files written that way are cast to the schema when loaded, and rewritten in it (under
the lock) by the next `add`.
"""

from __future__ import annotations

import fcntl
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xmfu.harness.results.analysis.coverage import variant
from xmfu.harness.results.analysis.flags import flags_text
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.schema import RUN_ID
from xmfu.harness.results.statistics.speedup import t_quantile

SERIES_KEY = ("workload", "case_id", "backend", "device", "dtype", "comparability_key")  # never mix meanings
# `check` judges a series only with at least MIN_BASELINE runs before the latest. The noise it compares a change
# with is 1.4826 x the median absolute deviation (MAD) of those runs, and the MAD of a few points means little:
# of 2 points it is half their gap, of 3 the smaller distance to their median. Simulated on Gaussian noise
# (seeded, 400,000 trials; tests/results/test_history.py pins it), a latest point beyond 3 such sigmas is pure
# noise on 23% of nights with 2 baseline points, 31% with 3, 15% with 5 and 9.5% with 7, the default window.
# (1.4826 = 1/Phi^-1(3/4) makes the MAD estimate a normal sigma: Rousseeuw & Croux, JASA 88, 1993.)
# Below 5 points the rule is a coin toss weighted by how many points there happen to be; 5 is the least we
# accept, and even there the rule alone leaves 15% of pure-noise nights flagged per series, which is why a
# flagged point is then weighed against its own evidence (`unreliable`: contended, or a CI or CV as wide as
# the change, or a change within the run-to-run spread of the baseline runs themselves) before anyone calls it a
# regression. Fewer runs: "insufficient history", not judged.
MIN_BASELINE = 5
MIN_RUNS = MIN_BASELINE + 1  # the baseline and the latest run
# Tokens per second, by the row's own key: training rows count `tokens` (tokens_per_s); inference rows count
# `prompt_tokens` (prefill) or `generated_tokens` (decode) (workloads/inference/spec.py, work_units), so reading
# `tokens_per_s` alone stored null for every inference row (issue 30, item 12). A row has one of the three.
TOKEN_KEYS = ("tokens_per_s", "prompt_tokens_per_s", "generated_tokens_per_s")


def _tokens_per_s(r: dict[str, Any]) -> Any:
    found = r.get("throughput") or {}
    return next((found[k] for k in TOKEN_KEYS if found.get(k) is not None), None)


COLUMNS = {  # column -> how to read it from a row (bundle rows are nested; the store is flat)
    "median_s": lambda r: (r.get("time_s") or {}).get("median"),
    "ci95_low_s": lambda r: (r.get("time_s") or {}).get("ci95_low"),
    "ci95_high_s": lambda r: (r.get("time_s") or {}).get("ci95_high"),
    "cv": lambda r: (r.get("time_s") or {}).get("cv"),
    "tflops": lambda r: r.get("tflops"), "mfu": lambda r: r.get("mfu"),
    "busbw_gbps": lambda r: r.get("busbw_gbps"),
    "tokens_per_s": _tokens_per_s,
    # added later (older stores read them as null): inference latencies (Latency records: median and p99 of the
    # time to first token, prefill rows, and per output token, decode rows) and memory-bandwidth utilization
    "ttft_s": lambda r: (r.get("ttft_s") or {}).get("p50"),
    "ttft_p99_s": lambda r: (r.get("ttft_s") or {}).get("p99"),
    "tpot_s": lambda r: (r.get("tpot_s") or {}).get("p50"),
    "tpot_p99_s": lambda r: (r.get("tpot_s") or {}).get("p99"),
    "mbu": lambda r: r.get("mbu"),
}


STRINGS = ("run_id", "git_sha", "xmfu_version", "platform", "device", "workload", "case_id", "backend", "dtype",
           "status", "comparability_key", "torch", "jax", "driver",
           # added later (older stores read them as null): the rest of the stack a number depends on, the host,
           # the suite a run was part of, and the coverage variant (attention: causal fwd_bwd...)
           "cuda", "hip", "nccl", "jaxlib", "triton", "host", "suite", "variant",
           # added later still: why the run marked the row contended ('' when it did not); the row's quality flags
           # (harness/results/analysis/flags.py: 'contended, CI missed', '' for none; null in files written before them)
           "contention", "flags")
# The software whose version changes `history report` lists between consecutive runs.
SOFTWARE = ("driver", "cuda", "hip", "nccl", "torch", "jax", "jaxlib", "triton", "xmfu_version")
LOWER_IS_BETTER = ("median_s", "ci95_low_s", "ci95_high_s", "cv", "ttft_s", "ttft_p99_s", "tpot_s", "tpot_p99_s")


class StoreError(ValueError):
    """The store cannot be read as asked: missing, not a folder, empty, or holding a file that is not Parquet."""


def pyarrow_module() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise RuntimeError("the history store needs pyarrow: pip install 'xmfu[history]'") from None
    return pyarrow


def schema() -> Any:
    """The store's one Arrow schema: text as strings, `created` a UTC timestamp, `timing_valid` a boolean, every
    figure a float64 (null where a row has none)."""
    pa = pyarrow_module()
    return pa.schema([("run_id", pa.string()), ("created", pa.timestamp("us", tz="UTC")),
                      *[(name, pa.string()) for name in STRINGS[1:]], ("timing_valid", pa.bool_()),
                      *[(name, pa.float64()) for name in COLUMNS], ("contended", pa.bool_())])


def when(created: Any) -> datetime:
    """A manifest's `created` (ISO 8601, 'Z' for UTC) or a stored timestamp, as an aware datetime."""
    if isinstance(created, datetime):
        return created if created.tzinfo else created.replace(tzinfo=timezone.utc)
    try:
        parsed = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"created {created!r} is not an ISO 8601 time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def stack_versions(environment: dict[str, Any]) -> dict[str, str]:
    """The versions of the software stack as environment.json records them ('' where it has none): CUDA and
    HIP as torch was built for them, NCCL (RCCL on ROCm, which reports NCCL's numbering) as torch loads it."""
    packages = environment.get("packages") or {}
    built = environment.get("torch") or {}
    nccl = environment.get("nccl") or {}
    return {"torch": packages.get("torch") or "", "jax": packages.get("jax") or "",
            "jaxlib": packages.get("jaxlib") or "", "triton": packages.get("triton") or "",
            "driver": str(environment.get("driver") or ""), "cuda": str(built.get("cuda") or ""),
            "hip": str(built.get("hip") or ""), "nccl": str(nccl.get("version") or "")}


def flatten(bundle: Bundle, environment: dict[str, Any]) -> list[dict[str, Any]]:
    m = bundle.manifest
    suite = m.get("suite") or {}  # harness/suites/suite.py's parts: name/version/definition hash
    common = {**stack_versions(environment), "host": str((environment.get("host") or {}).get("hostname") or ""),
              "suite": f"{suite['name']}/{suite['version']}/{suite['definition_sha']}" if suite else ""}
    out = []
    for r in bundle.cases:
        row = {"run_id": m["run_id"], "created": when(m["created"]), "git_sha": m.get("git_sha") or "",
               "xmfu_version": m.get("xmfu_version") or "", "platform": r["platform"], "device": r["device"],
               "workload": r["workload"], "case_id": r["case_id"], "backend": r["backend"], "dtype": r["dtype"],
               "status": r["status"], "timing_valid": bool(r.get("timing_valid")),
               "comparability_key": r["comparability_key"], "variant": variant(r), **common,
               # the row's own evidence that its timing was disturbed (harness/machine/contention.py)
               "contended": bool((r.get("contention") or {}).get("contended")),
               "contention": str((r.get("contention") or {}).get("reason") or ""), "flags": flags_text(r)}
        row.update({name: _float(read(r)) for name, read in COLUMNS.items()})
        out.append(row)
    return out


def worse(metric: str, change: float | None) -> bool:
    """Whether a relative change of `metric` is for the worse (times and their spread: up; the rest: down)."""
    if change is None:
        return False
    return change > 0 if metric in LOWER_IS_BETTER else change < 0


def _float(v: Any) -> float | None:
    return None if v is None or isinstance(v, bool) else float(v)


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


def _write(table: Any, target: Path) -> None:
    """Write to a temporary name and rename: a reader never sees half a file."""
    pa = pyarrow_module()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        pa.parquet.write_table(table, tmp)
        os.replace(tmp, target)
    except BaseException:  # a full disk (pyarrow raises OSError), an interrupt: no half-written file stays behind
        tmp.unlink(missing_ok=True)
        raise


def add(store: Path, bundle: Bundle, environment: dict[str, Any], upgrade: bool = True) -> bool:
    """Append one bundle; False when its run id is already stored (idempotent). `upgrade=False`: the caller has
    already called `upgrade(store)` for this batch (`xmfu history add` does, once per command): upgrading reads
    every stored file's schema, and doing that for each bundle made adding N bundles O(N^2) (issue 30, item 14).
    Files another job adds meanwhile are written by `add`, in the one schema, so they need no upgrade."""
    pa = pyarrow_module()
    target = store_file(store, bundle.manifest.get("run_id"))
    with locked(store):
        if upgrade:
            _upgrade(store)
        if target.exists():  # checked before the rows are flattened: re-adding a stored run costs a stat
            return False
        _write(pa.Table.from_pylist(flatten(bundle, environment), schema=schema()), target)
    return True


def upgrade(store: Path) -> None:
    """Rewrite the store's files of an older layout in the one schema, under the lock (see `_upgrade`)."""
    with locked(store):
        _upgrade(store)


def check_store(store: Path) -> list[Path]:
    """The store's Parquet files; StoreError when it does not exist, is not a folder, or holds no run."""
    if not store.exists():
        raise StoreError(f"the store {store} does not exist (xmfu history add BUNDLE... --store {store} makes it)")
    if not store.is_dir():
        raise StoreError(f"the store {store} is a file, not a folder of Parquet files")
    files = sorted(store.glob("*.parquet"))
    if not files:
        raise StoreError(f"the store {store} holds no runs yet (xmfu history add BUNDLE... --store {store})")
    return files


IDENTITY = ("run_id", "created", "workload", "case_id", "backend", "device", "dtype", "status",
            "comparability_key")  # a stored file without these is not a run of this store, whatever else it holds


def _foreign(path: Path, names: Sequence[str]) -> None:
    missing = [c for c in IDENTITY if c not in names]
    if missing:
        raise StoreError(f"{path} is a Parquet file of another schema (no {', '.join(missing)} column); move it "
                         "out of the store")


def check_writable(store: Path) -> None:
    """Before a suite runs (harness/suites/nightly.py): that `store` can be made, written in and locked, and that
    each of its Parquet files reads as a run of this store (its footer only: a file that is not Parquet, or of
    another schema, is named). StoreError naming the first thing that is wrong; nothing is left behind."""
    pa = pyarrow_module()
    try:
        store.mkdir(parents=True, exist_ok=True)
        probe = store / f".write-test.{os.getpid()}.tmp"
        try:
            probe.write_bytes(b"x")  # a read-only filesystem, a folder this user cannot write, a full disk
        finally:
            probe.unlink(missing_ok=True)
        with (store / ".lock").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(lock, fcntl.LOCK_UN)
            except BlockingIOError:
                pass  # another job is appending: `add` waits for it, as it should
    except OSError as exc:
        raise StoreError(f"the store {store} cannot be written or locked ({exc.strerror or exc})") from None
    for path in sorted(store.glob("*.parquet")):
        try:
            names = pa.parquet.read_schema(path).names
        except (pa.ArrowException, OSError) as exc:
            raise StoreError(f"{path} is not a readable Parquet file ({exc}); move it out of the store") from None
        _foreign(path, names)


def _read(path: Path) -> Any:
    """One stored run as a table in the store's schema (older files are cast: null-typed or integer columns
    to float64, `created` text to a timestamp; columns the schema lacks are dropped, missing ones are null)."""
    pa = pyarrow_module()
    try:
        table = pa.parquet.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise StoreError(f"{path} is not a readable Parquet file ({exc}); move it out of the store") from None
    _foreign(path, table.column_names)  # else every column would read as null: rows of nothing, silently
    target = schema()
    try:
        columns = [table.column(f.name).cast(f.type) if f.name in table.column_names
                   else pa.nulls(table.num_rows, f.type) for f in target]
    except (pa.ArrowException, ValueError) as exc:
        raise StoreError(f"{path} does not fit the history schema ({exc}); move it out of the store") from None
    return pa.Table.from_arrays(columns, schema=target)


def _upgrade(store: Path) -> None:
    """Rewrite files of an older layout in the one schema (called under the lock), so that any Parquet reader
    reads the folder again. A file that cannot be read is left for `load` to name."""
    pa = pyarrow_module()
    target = schema()
    for path in sorted(store.glob("*.parquet")):
        try:
            if pa.parquet.read_schema(path).equals(target):
                continue
            _write(_read(path), path)
        except (StoreError, pa.ArrowException, OSError):
            continue


def load(store: Path) -> list[dict[str, Any]]:
    """Every stored row; StoreError naming what is wrong with the store or with one of its files."""
    pa = pyarrow_module()
    return pa.concat_tables([_read(f) for f in check_store(store)]).to_pylist()


def series(rows: Sequence[dict[str, Any]], metric: str) -> dict[tuple, list[tuple[datetime, float]]]:
    """SERIES_KEY -> [(created, value)] in time order, ok rows with a valid timing only. Runs whose
    comparability keys differ (another FLOP convention, protocol or parameters) are separate series."""
    out: dict[tuple, list[tuple[datetime, float]]] = defaultdict(list)
    for r in rows:
        if r["status"] == "ok" and r.get(metric) is not None and r.get("timing_valid", True):
            out[tuple(r.get(k) for k in SERIES_KEY)].append((when(r["created"]), float(r[metric])))
    return {k: sorted(v) for k, v in out.items()}


def series_label(key: tuple, keys: Sequence[tuple]) -> str:
    """'matmul c torch GPU bf16', with the comparability key added where two series differ only by it."""
    named = dict(zip(SERIES_KEY, key, strict=True))
    head = " ".join(str(named[k]) for k in SERIES_KEY[:-1])
    twins = sum(1 for other in keys if other[:-1] == key[:-1])
    return f"{head} [key {named['comparability_key']}]" if twins > 1 else head


def gap(rows: Sequence[dict[str, Any]], metric: str, numerator: str, denominator: str) -> list[dict[str, Any]]:
    """metric(numerator platform or device) / metric(denominator) on matching cases, per day. A case matches
    only with the same comparability key on both sides (the same spec, dtype, FLOP convention and protocol)."""
    by_day: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r["status"] != "ok" or r.get(metric) is None or not r.get("timing_valid", True):
            continue
        side = next((s for s in (numerator, denominator) if s in (r["platform"], r["device"])), None)
        if side:
            day = when(r["created"]).date().isoformat()
            key = (day, r["workload"], r["case_id"], r["dtype"], r.get("comparability_key"))
            by_day[key][side].append(float(r[metric]))
    out = []
    for (day, workload, case_id, dtype, comparability), sides in sorted(by_day.items(), key=lambda kv: str(kv[0])):
        if sides[numerator] and sides[denominator]:
            ratio = statistics.fmean(sides[numerator]) / statistics.fmean(sides[denominator])
            out.append({"day": day, "workload": workload, "case_id": case_id, "dtype": dtype,
                        "comparability_key": comparability, "ratio": ratio})
    return out


@dataclass(frozen=True)
class Rule:
    """How `history check` (and the history page) judge a point: against the median of the `window` runs before
    it, flagged beyond max(`sigmas` x the robust noise, `min_change` x that median). The defaults are written
    here once; the commands' options and the functions below take theirs from RULE."""

    window: int = 7
    sigmas: float = 3.0
    min_change: float = 0.02


RULE = Rule()


def insufficient(rows: Sequence[dict[str, Any]], metric: str, minimum: int = MIN_RUNS) -> list[dict[str, Any]]:
    """The series `check` cannot judge: fewer than `minimum` runs."""
    return [{**dict(zip(SERIES_KEY, key, strict=True)), "runs": len(points), "minimum": minimum}
            for key, points in series(rows, metric).items() if len(points) < minimum]


def check(rows: Sequence[dict[str, Any]], metric: str, window: int = RULE.window, sigmas: float = RULE.sigmas,
          min_change: float = RULE.min_change) -> list[dict[str, Any]]:
    """Series whose latest value moved more than the noise of its rolling baseline.

    Baseline = median of the previous `window` values; noise = 1.4826 x their median absolute deviation (a
    robust standard deviation); flagged when |latest - baseline| > max(sigmas x noise, min_change x baseline).
    """
    flagged = []
    latest = _latest_rows(rows, metric)
    for key, points in series(rows, metric).items():
        if len(points) < MIN_RUNS:
            continue
        found = _judge(points, len(points) - 1, window, sigmas, min_change)
        if found:
            flagged.append({**dict(zip(SERIES_KEY, key, strict=True)), "metric": metric, **found,
                            "flags": stored_flags(latest[key]),
                            **unreliable(latest[key], found["change"], found["run_to_run"])})
    return flagged


def stored_flags(row: dict[str, Any]) -> str:
    """A stored row's quality flags ('contended, CI missed'; '' for none). A file written before the `flags`
    column has only `contended` to say (null flags): that is what it says."""
    if row.get("flags") is not None:
        return str(row["flags"])
    return "contended" if row.get("contended") else ""


def flagged_within_noise(rows: Sequence[dict[str, Any]], metric: str,
                         changed: Sequence[dict[str, Any]]) -> list[tuple[tuple, str]]:
    """(series key, flags) of the series `check` judged and found within the noise whose latest row carries
    quality flags: 'no change' on a row that says it was contended is not the same verdict as on a clean one."""
    seen = {tuple(f[k] for k in SERIES_KEY) for f in changed}
    judged = {key for key, points in series(rows, metric).items() if len(points) >= MIN_RUNS}
    return [(key, said) for key, row in _latest_rows(rows, metric).items()
            if key in judged and key not in seen and (said := stored_flags(row))]


def _latest_rows(rows: Sequence[dict[str, Any]], metric: str) -> dict[tuple, dict[str, Any]]:
    """SERIES_KEY -> the series' latest row (the one `series` puts last)."""
    out: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if r["status"] == "ok" and r.get(metric) is not None and r.get("timing_valid", True):
            key = tuple(r.get(k) for k in SERIES_KEY)
            if key not in out or (when(r["created"]), float(r[metric])) >= (when(out[key]["created"]),
                                                                            float(out[key][metric])):
                out[key] = r
    return out


def spread(row: dict[str, Any]) -> dict[str, float | None]:
    """The row's own precision, as fractions of its median time: the 95% CI half-width and the CV of its samples
    (both recorded by the run; None where it has none)."""
    median, low, high = row.get("median_s"), row.get("ci95_low_s"), row.get("ci95_high_s")
    half = (high - low) / 2 / median if median and low is not None and high is not None else None
    return {"ci95_half_width": half, "cv": row.get("cv")}


# How unlikely a run-to-run fluctuation must be before a flagged change counts: the latest run lies outside the
# central 99.98% prediction interval of its baseline runs (0.01% on the side of the worse; see `run_to_run`). Why
# so far out: a nightly judges each series every night, 27 of them in suite version 1 at smoke sizes, about
# 10,000 series-nights a year; at 1e-4 each, normal run-to-run noise alone pages someone about once a year
# (a Bonferroni budget), where 0.001 would page about ten times.
PREDICTION_TAIL = 1e-4


def run_to_run(before: Sequence[float], latest: float) -> dict[str, Any] | None:
    """Whether `latest` could be one more run like the `before` runs, judged by their own run-to-run spread:
    {"sd", "runs", "bound", "within"} on natural-log values (sd and bound in log units, about fractions), or None
    with fewer than 2 positive values.

    Why: a row's CI and CV measure the spread of samples within one process, and processes differ by more
    (collectives between CPU processes on a shared 2-core machine were bimodal from one run to the next, each
    run's own CI narrow: -54% to -89% between runs of one build), while the MAD that `_judge` scales its limit
    by is near 0 when 4 of 5 baseline runs agree, however far the fifth lies. So the baseline's spread is
    taken as the sample standard deviation of its logs, which the fifth run does widen, and the latest run is
    held against the prediction interval for one new observation from the same normal distribution, mean and
    variance unknown: (y - mean) / (sd * sqrt(1 + 1/n)) follows Student's t with n - 1 degrees of freedom
    (Hahn & Meeker, Statistical Intervals, Wiley 1991; the form R's EnvStats::predIntNorm computes). Logs, because
    every judged metric is a time or proportional to 1/time, so a slowdown by a factor is one distance either
    way. With the t quantile at 1 - PREDICTION_TAIL a run of an unchanged build lies beyond the bound on the
    side of the worse on PREDICTION_TAIL of series-nights when its log-values are normal, whatever n (the t
    interval is exact); at MIN_BASELINE = 5 runs the bound is 14.3 sds, at 7 (the window) 8.6: a 2x slowdown
    (log 2 = 0.69) is still judged in series whose runs differ by up to 4.8% and 8.1% (sd)."""
    logs = [math.log(v) for v in before if v > 0]
    if len(logs) < 2 or latest <= 0:
        return None
    n, mean, sd = len(logs), statistics.fmean(logs), statistics.stdev(logs)
    bound = t_quantile(PREDICTION_TAIL, n - 1) * sd * math.sqrt(1 + 1 / n)
    return {"sd": sd, "runs": n, "bound": bound, "within": abs(math.log(latest) - mean) <= bound}


def unreliable(row: dict[str, Any], change: float | None,
               history_spread: dict[str, Any] | None = None) -> dict[str, Any]:
    """Whether a change the rule flagged is evidence of anything, by the row's own account and its series':
    `contended` when the run marked it measured under contention (another process on the CPU or GPU), `noisy`
    when its own 95% CI half-width or its CV is at least as wide as the change (the point could be anywhere in
    that width), or when the latest run lies within the prediction interval of the baseline runs
    (`history_spread`: run_to_run's answer; runs of this series have differed that much before). Empty when
    neither discounts it. Every metric `check` judges is a time or proportional to 1/time, so the time's
    relative spread is the metric's."""
    figures: dict[str, Any] = spread(row)
    if history_spread is not None:
        figures["run_to_run_sd"] = history_spread["sd"]
    if row.get("contended"):
        return {"unreliable": "contended", "why": row.get("contention") or "contended", **figures}
    size = abs(change) if change is not None else 0.0
    wide = {k: v for k, v in figures.items() if k != "run_to_run_sd" and v is not None and v >= size}
    if wide:
        return {"unreliable": "noisy", "why": ", ".join(f"{k} {100 * v:.1f}%" for k, v in wide.items()), **figures}
    if history_spread is not None and history_spread["within"]:
        bound = history_spread["bound"]
        why = (f"run-to-run sd {100 * history_spread['sd']:.1f}% (of log values) over the {history_spread['runs']} "
               f"runs before; their {100 * (1 - 2 * PREDICTION_TAIL):g}% prediction interval reaches a factor "
               f"{math.exp(bound):.3g} either side of their geometric mean")
        return {"unreliable": "noisy", "why": why, **figures}
    return {}


def describe(f: dict[str, Any]) -> str:
    """One flagged change as a line: series, latest vs baseline, change and limit, and why it is unreliable."""
    line = (f"{f['workload']} {f['case_id']} {f['backend']} {f['device']}: {f['metric']} {f['latest']:.4g} vs "
            f"baseline {f['baseline']:.4g} ({100 * f['change']:+.1f}%, limit {f['limit']:.3g})")
    if f.get("unreliable"):
        line += f" [unreliable: {f['unreliable']}: {f['why']}]"
    if f.get("flags"):  # the latest row's quality flags (harness/results/analysis/flags.py), beside the verdict
        line += f" [flags: {f['flags']}]"
    return line


def _judge(points: Sequence[tuple[datetime, float]], i: int, window: int, sigmas: float,
           min_change: float, start: int = 0) -> dict[str, Any] | None:
    """Point i against the median of the `window` points before it, none before `start` (check's rule);
    None within the noise."""
    values = [v for _, v in points]
    before, latest = values[max(start, i - window):i], values[i]
    base = statistics.median(before)
    mad = statistics.median(abs(v - base) for v in before)
    limit = max(sigmas * 1.4826 * mad, min_change * abs(base))
    if abs(latest - base) <= limit:
        return None
    return {"latest": latest, "baseline": base, "change": latest / base - 1 if base else None, "limit": limit,
            "at": points[i][0], "previous_at": points[i - 1][0], "run_to_run": run_to_run(before, latest)}


def steps(rows: Sequence[dict[str, Any]], metric: str, window: int = RULE.window, sigmas: float = RULE.sigmas,
          min_change: float = RULE.min_change) -> list[dict[str, Any]]:
    """The changes beyond the noise in the whole history of every series, each marked where it began: a
    point is judged by `check`'s rule against the runs before it, and after a change only the runs since
    it form the baseline (so one step is one mark, not one for every night until the median catches up)."""
    out = []
    for key, points in series(rows, metric).items():
        start = 0
        for i in range(len(points)):
            if i - start < MIN_RUNS - 1:  # too few runs at this level to judge yet
                continue
            found = _judge(points, i, window, sigmas, min_change, start)
            if found:
                out.append({**dict(zip(SERIES_KEY, key, strict=True)), "metric": metric, **found,
                            "worse": worse(metric, found["change"])})
                start = i
    return out


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
