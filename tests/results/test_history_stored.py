"""The history store's record (history/stored.py): the schema built from it, bundle rows flattened into it, and the
store's readers reading its attributes."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from tests.results.test_history import _rows
from xmfu.harness.results.history import judge, parquet
from xmfu.harness.results.history.stored import Stored

pytest.importorskip("pyarrow", exc_type=ImportError)  # pyarrow 2x on numpy 1.x raises ImportError


def _written(row):
    """An in-memory bundle of one row as written (its record decoded on first use, as read_bundle's are)."""
    from pathlib import Path

    from xmfu.harness.results.bundle.reader import Bundle

    manifest = {"run_id": "r", "created": "2026-11-23T00:00:00Z", "git_sha": "abc", "xmfu_version": "0.1.0"}
    return Bundle(Path("."), manifest, [{**row, "run_id": "r"}], [])


ENERGY = ("mean_power_w", "j_per_token", "tokens_per_s_per_w", "tflops_per_w")


def test_the_stores_schema_is_its_record_column_by_column():
    """The Arrow schema is built from stored.Stored: the same columns, in the same order and of the same types as
    the literal schema it replaced, so files written before it are not rewritten and read back alike."""
    import pyarrow as pa

    from xmfu.harness.results.history import stored

    strings = ("git_sha", "xmfu_version", "platform", "device", "workload", "case_id", "backend", "dtype", "status",
               "comparability_key", "torch", "jax", "driver", "cuda", "hip", "nccl", "jaxlib", "triton", "host",
               "suite", "variant", "contention", "flags")
    figures = ("median_s", "ci95_low_s", "ci95_high_s", "cv", "tflops", "mfu", "busbw_gbps", "tokens_per_s",
               "ttft_s", "ttft_p99_s", "tpot_s", "tpot_p99_s", "mbu")
    expected = pa.schema([("run_id", pa.string()), ("created", pa.timestamp("us", tz="UTC")),
                          *[(n, pa.string()) for n in strings], ("timing_valid", pa.bool_()),
                          *[(n, pa.float64()) for n in figures], ("contended", pa.bool_()),
                          ("suite_id", pa.string()),  # issue 42 item 12: a suite's parts counted as one run
                          ("overrides", pa.string()), ("bundle", pa.string()),  # issue 38, item 2: a repro per point
                          ("image_digest", pa.string()),
                          ("energy_source", pa.string()),  # issue 39: energy per token over time
                          *[(n, pa.float64()) for n in ENERGY]])
    assert parquet.schema().equals(expected)
    assert tuple(parquet.COLUMNS) == stored.FIGURES == (*figures, *ENERGY)  # every figure column has its reader
    assert set(parquet.IDENTITY) <= set(stored.kinds())


def test_flatten_reads_the_records_and_keeps_a_cv_the_row_did_not_write_null():
    """flatten reads the typed rows; only `cv` looks at the row as written: a time without one (older bundles)
    reads as cv 0.0 in the record, and the store has kept it null."""
    from tests.results.rows import valid_row

    row = valid_row(contention={"contended": True, "reason": "pid 9", "busiest_others": [], "load_avg": [1.0]})
    bundle = _written(row)
    (stored_row,) = parquet.flatten(bundle, {})
    assert stored_row.cv == row["time_s"]["cv"] and stored_row.median_s == row["time_s"]["median"]
    assert stored_row.contended and stored_row.contention == "pid 9" and stored_row.timing_valid is True
    assert stored_row.key() == ("matmul", "c1", "torch", "cpu", "fp32", row["comparability_key"])
    without = {**row, "time_s": {k: v for k, v in row["time_s"].items() if k != "cv"}}
    bundle = _written(without)
    assert bundle.rows[0].time_s.cv == 0.0  # the record's default
    (stored_row,) = parquet.flatten(bundle, {})
    assert stored_row.cv is None and stored_row.median_s == row["time_s"]["median"]


def test_a_metric_the_store_has_no_column_for_has_no_series():
    rows = _rows([700, 701])
    assert rows[0].figure("tflops") == 700 and rows[0].figure("device") is None and rows[0].figure("nope") is None
    assert judge.series(rows, "nope") == {}


def test_a_row_without_a_valid_timing_is_no_point_of_a_series():
    """A null timing_valid (a file written before the column) is not valid, as when rows were dicts."""
    rows = _rows([700, 701, 702])
    rows[1] = replace(rows[1], timing_valid=None)
    rows[2] = replace(rows[2], timing_valid=False)
    assert [v for _, v in judge.series(rows, "tflops")[rows[0].key()]] == [700]


def test_the_run_to_run_noise_takes_a_bundle_row_as_its_record_or_as_written():
    from tests.results.rows import valid_row
    from xmfu.harness.results.bundle.reader import typed

    row = valid_row()
    store = [Stored(run_id=f"r{i}", created=parquet.when(f"2026-11-{i + 1:02d}T00:00:00Z"), workload="matmul",
                    case_id="c1", backend="torch", device="cpu", platform="cpu", dtype="fp32", status="ok",
                    timing_valid=True, comparability_key=row["comparability_key"], median_s=m)
             for i, m in enumerate([1.0, 1.1, 0.9, 1.0])]
    noise = judge.run_to_run_noise(store)
    assert noise(row) == noise(typed(row)) and noise(row)[1] == 4
    assert noise({**row, "device": "other"}) is None


def test_a_rows_energy_is_stored_so_j_per_token_has_a_history():
    from tests.results.rows import valid_row

    energy = {"source": "counter", "scope": "device", "mean_power_w": 500.0, "j_per_token": {"generated_tokens": 2.5},
              "tokens_per_s_per_w": {"generated_tokens": 0.4}, "tflops_per_w": 0.8}
    (stored_row,) = parquet.flatten(_written(valid_row(energy=energy)), {})
    assert (stored_row.energy_source, stored_row.mean_power_w, stored_row.j_per_token) == ("counter", 500.0, 2.5)
    assert stored_row.tokens_per_s_per_w == 0.4 and stored_row.tflops_per_w == 0.8
    (older,) = parquet.flatten(_written(valid_row()), {})  # a row written before energy was recorded
    assert older.energy_source == "" and older.j_per_token is None
