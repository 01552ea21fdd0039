"""`xmfu export BUNDLES -o rows.parquet|rows.csv`: every row of every bundle as one flat table, for pandas.

One row per case and backend, as in cases.jsonl, flattened one level: a dict field becomes one column per key
(`time_s.median` -> `time_s_median`, `params.causal` -> `params_causal`, `telemetry.power_w_mean` ->
`telemetry_power_w_mean`, `throughput.tokens_per_s` -> `throughput_tokens_per_s`); anything nested deeper, and
every list, is a JSON string, except `tflops_ci95`, which becomes `tflops_ci95_low` and `tflops_ci95_high`.
The run's `created`, `git_sha` and `xmfu_version` come from its manifest. Parquet columns are typed from
their values (bool, int64, float64, a UTC timestamp for `created`, else string); a column whose values mix
types is written as text.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from xmfu.harness.results.bundle.reader import Bundle

SUFFIXES = (".parquet", ".csv")
FIRST = ("run_id", "created", "git_sha", "xmfu_version", "workload", "case_id", "backend", "platform", "device",
         "dtype", "status", "reason", "timing_valid", "tflops", "tflops_ci95_low", "tflops_ci95_high", "mfu",
         "peak_tflops", "time_s_median", "time_s_ci95_low", "time_s_ci95_high")


def cell(row: dict[str, Any], name: str) -> Any:
    """One column of a flattened row, None where the row has no such key. Export reads the rows as written
    (Bundle.raw_rows), not as records (Bundle.rows): a writer of another format keeps a key the row did not write
    absent (no column when no row has it, an empty CSV cell, a null in Parquet), where a record would give it
    its declared default (a time's cv 0.0, a contention's empty lists)."""
    return row.get(name)


def _scalar(v: Any) -> Any:
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list, tuple)) else v


def flatten_row(row: dict[str, Any], manifest: dict[str, Any]) -> dict[str, Any]:
    """One bundle row as flat columns (see the module docstring)."""
    out: dict[str, Any] = {"created": manifest.get("created"), "git_sha": manifest.get("git_sha"),
                           "xmfu_version": manifest.get("xmfu_version")}
    for key, v in row.items():
        ci = v if key == "tflops_ci95" and isinstance(v, list) and len(v) == 2 else None
        if key == "tflops_ci95":
            out["tflops_ci95_low"], out["tflops_ci95_high"] = ci if ci else (None, None)
        elif isinstance(v, dict):
            out.update({f"{key}_{k}": _scalar(inner) for k, inner in v.items()})
        else:
            out[key] = _scalar(v)
    return out


def rows(bundles: Sequence[Bundle]) -> list[dict[str, Any]]:
    return [flatten_row(r, b.manifest) for b in bundles for r in b.raw_rows]


def columns(flat: Sequence[dict[str, Any]]) -> list[str]:
    """The known columns first, in a reading order, then every other one by name."""
    return ordered({k for r in flat for k in r})


def ordered(names: set[str]) -> list[str]:
    return [c for c in FIRST if c in names] + sorted(names - set(FIRST))


def _created(v: Any) -> Any:
    from xmfu.harness.results.history.parquet import when

    try:
        return when(v)
    except ValueError:
        return v  # not a time: the column falls back to text


def arrow_type(values: Sequence[Any]) -> Any:
    """The Arrow type a column's values share (see the module docstring); None for text."""
    return arrow_kind({type(v) for v in values if v is not None})


def arrow_kind(kinds: set[type]) -> Any:
    """The Arrow type for a column whose non-null values have these Python types; None for text."""
    import pyarrow as pa

    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        return pa.int64()
    if kinds and kinds <= {int, float}:
        return pa.float64()
    if kinds == {datetime}:
        return pa.timestamp("us", tz="UTC")
    return None


def _array(values: list[Any], kind: Any) -> Any:
    """One column as an Arrow array of `kind` (None: text, anything else JSON-encoded)."""
    import pyarrow as pa

    if kind is None:
        return pa.array([v if v is None or isinstance(v, str) else json.dumps(v, default=str) for v in values],
                        pa.string())
    return pa.array([float(v) if v is not None and kind == pa.float64() else v for v in values], kind)


def table(flat: Sequence[dict[str, Any]]) -> Any:
    """The rows as one pyarrow Table with a type per column."""
    from xmfu.harness.results.history.parquet import pyarrow_module

    pa = pyarrow_module()
    arrays, fields = [], []
    for name in columns(flat):
        values = [_created(cell(r, name)) if name == "created" else cell(r, name) for r in flat]
        kind = arrow_type(values)
        arrays.append(_array(values, kind))
        fields.append(pa.field(name, kind or pa.string()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_csv(flat: Sequence[dict[str, Any]], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns(flat), restval="")
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in flat)


def write(flat: Sequence[dict[str, Any]], path: Path) -> None:
    """Parquet or CSV by the file's suffix; ValueError for any other."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        write_csv(flat, path)
    elif suffix == ".parquet":
        from xmfu.harness.results.history.parquet import pyarrow_module

        pyarrow_module().parquet.write_table(table(flat), path)
    else:
        raise ValueError(f"unknown suffix {suffix or '(none)'!r}. Allowed: {', '.join(SUFFIXES)}")


def _bundle_rows(bundle: Bundle) -> list[dict[str, Any]]:
    return [{**r, "created": _created(cell(r, "created"))} if "created" in r else r for r in rows([bundle])]


def survey(bundles: Iterable[Bundle]) -> tuple[dict[str, set[type]], int]:
    """Streaming export's first pass: each column's value types, and the row count, one bundle at a time."""
    kinds: dict[str, set[type]] = {}
    count = 0
    for bundle in bundles:
        for r in _bundle_rows(bundle):
            count += 1
            for k, v in r.items():
                kinds.setdefault(k, set()).update(() if v is None else (type(v),))
    return kinds, count


def write_streaming(kinds: dict[str, set[type]], bundles: Iterable[Bundle], path: Path) -> None:
    """Streaming export's second pass: the rows of one bundle at a time appended to `path` (Parquet: a row group
    per bundle; CSV: its lines), the columns and types fixed by `survey`. Memory holds one bundle, not every
    row: `export` of 50k rows built them all first and held 3.0 GB (issue 30, item 14)."""
    from xmfu.harness.results.history.parquet import pyarrow_module

    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"unknown suffix {suffix or '(none)'!r}. Allowed: {', '.join(SUFFIXES)}")
    names = ordered(set(kinds))
    if suffix == ".csv":
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=names, restval="")
            writer.writeheader()
            for bundle in bundles:
                writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows([bundle]))
        return
    pa = pyarrow_module()
    types = {n: arrow_kind(kinds[n]) for n in names}
    schema = pa.schema([pa.field(n, types[n] or pa.string()) for n in names])
    with pa.parquet.ParquetWriter(path, schema) as writer:
        for bundle in bundles:
            flat = _bundle_rows(bundle)
            if flat:
                writer.write_table(pa.Table.from_arrays([_array([cell(r, n) for r in flat], types[n])
                                                         for n in names], schema=schema))
