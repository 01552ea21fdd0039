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
import os
import shlex
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec

from xmfu.harness.results.analysis.coverage import variant
from xmfu.harness.results.analysis.flags import flags_text
from xmfu.harness.results.bundle.archive import EXTRACTED
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.history.stored import SERIES_KEY as SERIES_KEY  # where the store's readers find it
from xmfu.harness.results.history.stored import Stored, kinds
from xmfu.harness.results.schema import RUN_ID
from xmfu.harness.results.schema.row import Row

# Tokens per second, by the row's own key: training rows count `tokens` (tokens_per_s); inference rows count
# `prompt_tokens` (prefill) or `generated_tokens` (decode) (workloads/inference/spec.py, work_units), so reading
# `tokens_per_s` alone stored null for every inference row (issue 30, item 12). A row has one of the three.
TOKEN_KEYS = ("tokens_per_s", "prompt_tokens_per_s", "generated_tokens_per_s")


def _tokens_per_s(row: Row) -> float | None:
    found = row.throughput or {}
    return next((found[k] for k in TOKEN_KEYS if found.get(k) is not None), None)


def _per_token(row: Row, field: str) -> float | None:
    """The row's energy figure `field` (j_per_token, tokens_per_s_per_w) for the token kind _tokens_per_s reads."""
    found = (getattr(row.energy, field) if row.energy is not None else None) or {}
    kinds = (key.removesuffix("_per_s") for key in TOKEN_KEYS)  # tokens, prompt_tokens, generated_tokens
    return next((found[k] for k in kinds if found.get(k) is not None), None)


# Each figure column of the store (stored.Stored declares their types) -> how to read it from a bundle row (nested;
# the store is flat).
COLUMNS: dict[str, Callable[[Row], Any]] = {
    "median_s": lambda r: r.time_s.median if r.time_s else None,
    "ci95_low_s": lambda r: r.time_s.ci95_low if r.time_s else None,
    "ci95_high_s": lambda r: r.time_s.ci95_high if r.time_s else None,
    "cv": lambda r: r.time_s.cv if r.time_s else None,  # null where the row wrote none: see _figures
    "tflops": lambda r: r.tflops, "mfu": lambda r: r.mfu,
    "busbw_gbps": lambda r: r.busbw_gbps,
    "tokens_per_s": _tokens_per_s,
    "ttft_s": lambda r: r.ttft_s.p50 if r.ttft_s else None,
    "ttft_p99_s": lambda r: r.ttft_s.p99 if r.ttft_s else None,
    "tpot_s": lambda r: r.tpot_s.p50 if r.tpot_s else None,
    "tpot_p99_s": lambda r: r.tpot_s.p99 if r.tpot_s else None,
    "mbu": lambda r: r.mbu,
    "mean_power_w": lambda r: r.energy.mean_power_w if r.energy else None,
    "j_per_token": lambda r: _per_token(r, "j_per_token"),
    "tokens_per_s_per_w": lambda r: _per_token(r, "tokens_per_s_per_w"),
    "tflops_per_w": lambda r: r.energy.tflops_per_w if r.energy else None,
}
# The software whose version changes `history report` lists between consecutive runs.
SOFTWARE = ("driver", "cuda", "hip", "nccl", "torch", "jax", "jaxlib", "triton", "xmfu_version")


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
    arrow = {str: pa.string(), datetime: pa.timestamp("us", tz="UTC"), bool: pa.bool_(), float: pa.float64()}
    return pa.schema([(name, arrow[kind]) for name, kind in kinds().items()])  # stored.Stored, column by column


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


def flatten(bundle: Bundle, environment: dict[str, Any]) -> list[Stored]:
    """The bundle's rows as the store's records: the run's manifest and stack beside each row's own columns."""
    m = bundle.manifest
    suite = m.get("suite") or {}  # harness/suites/suite.py's parts: name/version/definition hash
    common = {**stack_versions(environment), "host": str((environment.get("host") or {}).get("hostname") or ""),
              "suite": f"{suite['name']}/{suite['version']}/{suite['definition_sha']}" if suite else "",
              "suite_id": str(suite.get("suite_id") or ""),
              "run_id": m["run_id"], "created": when(m["created"]), "git_sha": m.get("git_sha") or "",
              "xmfu_version": m.get("xmfu_version") or "", "overrides": shlex.join(map(str, m.get("overrides") or [])),
              "bundle": _kept_folder(bundle.folder),
              "image_digest": str((environment.get("container") or {}).get("XMFU_IMAGE_DIGEST") or "")}
    return [Stored(**common, **_columns(record), **_figures(record, raw))
            for raw, record in zip(bundle.raw_rows, bundle.rows, strict=True)]


def _kept_folder(folder: Path) -> str:
    """Where the bundle stays: its folder, or '' for one read from an archive (`archive.opened` extracts it into
    a temporary folder that is removed once it is added)."""
    where = folder.resolve()
    temporary = Path(tempfile.gettempdir()).resolve()
    extracted = where.is_relative_to(temporary) and any(p.name.startswith(EXTRACTED) for p in where.parents)
    return "" if extracted else str(where)


def _columns(row: Row) -> dict[str, Any]:
    """A bundle row's own text and flag columns."""
    contention = row.contention  # the row's own evidence that its timing was disturbed (harness/machine/contention.py)
    return {"platform": row.platform, "device": row.device, "workload": row.workload, "case_id": row.case_id,
            "backend": row.backend, "dtype": row.dtype, "status": row.status, "timing_valid": bool(row.timing_valid),
            "comparability_key": row.comparability_key, "variant": variant(row),
            "contended": bool(contention and contention.contended),
            "contention": str(contention.reason or "") if contention else "", "flags": flags_text(row),
            "energy_source": row.energy.source if row.energy else ""}


def _figures(row: Row, raw: dict[str, Any]) -> dict[str, float | None]:
    """A bundle row's figure columns. `cv` is read from the row as written: the record gives a time written
    without one (rows of older bundles) cv 0.0, and the store has always kept such a row's cv null."""
    out = {name: as_float(read(row)) for name, read in COLUMNS.items()}
    if "cv" not in (raw.get("time_s") or {}):
        out["cv"] = None
    return out


def as_float(v: Any) -> float | None:
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
        rows = [msgspec.structs.asdict(r) for r in flatten(bundle, environment)]
        _write(pa.Table.from_pylist(rows, schema=schema()), target)
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


def load(store: Path) -> list[Stored]:
    """Every stored row, as its record; StoreError naming what is wrong with the store or with one of its files."""
    pa = pyarrow_module()
    return [Stored(**r) for r in pa.concat_tables([_read(f) for f in check_store(store)]).to_pylist()]


