"""History: idempotent, concurrent-safe appends; trends and the platform gap; regression detection."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest

from harness.results import history
from harness.results.reader import read_bundle

pytest.importorskip("pyarrow")


def _make(tmp_path, name, median, created="2026-11-01T00:00:00.000000Z"):
    from tests.results.test_compare import _bundle

    return _bundle(tmp_path, name, median, created=created)


def _add(args):
    store, folder = args
    from harness.results.history import add

    return add(store, read_bundle(folder), {})


def test_add_is_idempotent_and_safe_under_concurrency(tmp_path):
    store = tmp_path / "store"
    folders = [_make(tmp_path, f"run{i}", 1.0 + i / 100).folder for i in range(6)]
    jobs = [(store, f) for f in folders] * 2  # every bundle twice, from 4 processes at once
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        added = pool.map(_add, jobs)
    assert sum(added) == 6  # each run stored exactly once
    rows = history.load(store)
    assert sorted(r["run_id"] for r in rows) == [f"run{i}" for i in range(6)]
    assert not list(store.glob(".*.tmp"))


def test_pandas_reads_the_store_as_one_table(tmp_path):
    """The module's promise: pandas (the `history` extra) reads the folder of Parquet files as one table."""
    pd = pytest.importorskip("pandas")
    store = tmp_path / "store"
    for i in range(2):
        history.add(store, read_bundle(_make(tmp_path, f"run{i}", 1.0 + i / 10).folder), {})
    table = pd.read_parquet(store)
    assert sorted(table["run_id"].unique()) == ["run0", "run1"] and len(table) == len(history.load(store))


def _rows(values, device="GPU A", platform="cuda"):
    return [{"run_id": f"r{i}", "created": f"2026-11-{i + 1:02d}T00:00:00Z", "workload": "matmul", "case_id": "c",
             "backend": "torch", "device": device, "platform": platform, "dtype": "bf16", "status": "ok",
             "timing_valid": True, "tflops": v, "mfu": v / 1000, "comparability_key": "k"} for i, v in enumerate(values)]


def test_check_flags_a_step_but_not_noise():
    noisy = [700 + d for d in (3, -2, 4, -3, 1, -4, 2, 0, -1, 3)]
    assert history.check(_rows(noisy), "tflops") == []
    stepped = [*noisy, 640.0]  # -8.6%, far outside the noise
    (flag,) = history.check(_rows(stepped), "tflops")
    assert flag["baseline"] == 700 and flag["latest"] == 640  # median of the previous 7 values
    assert flag["change"] == pytest.approx(640 / 700 - 1)


def test_gap_between_platforms_per_day():
    rows = _rows([600, 610], device="AMD", platform="rocm") + _rows([800, 800], device="NV", platform="cuda")
    gap = history.gap(rows, "tflops", "rocm", "cuda")
    assert [g["ratio"] for g in gap] == [pytest.approx(0.75), pytest.approx(610 / 800)]


def test_cli_add_trend_check(tmp_path):
    store = tmp_path / "store"
    folders = [_make(tmp_path, f"n{i}", 1.0, created=f"2026-11-0{i + 1}T00:00:00.000000Z").folder for i in range(4)]

    def xmfu(*args):
        return subprocess.run([sys.executable, "-m", "harness.cli", "history", *args, "--store", str(store)],
                              capture_output=True, text=True, timeout=120)

    assert "added" in xmfu("add", *map(str, folders)).stdout
    assert "already in the store" in xmfu("add", str(folders[0])).stdout
    trend = xmfu("trend", "--metric", "median_s", "-o", str(tmp_path / "t.svg"))
    assert trend.returncode == 0 and "4 points" in trend.stdout
    assert (tmp_path / "t.svg").read_text().startswith("<svg")
    assert xmfu("check", "--metric", "median_s").returncode == 0
