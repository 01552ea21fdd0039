"""The result tools scale linearly (issue 30, item 14): counted work, not timings, so the tests hold on any
machine. benchmarks/results_scale.py measures the figures."""

from __future__ import annotations

import weakref

import msgspec
import pytest

from tests.results.rows import MANIFEST, matmul_row, samples_of, write_bundle
from xmfu.harness.cli.main import main
from xmfu.harness.results.analysis import grouping
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.bundle.writer import BundleWriter
from xmfu.harness.results.history import parquet
from xmfu.harness.results.plots import report_plots
from xmfu.harness.results.rederive import times
from xmfu.harness.results.render import export
from xmfu.harness.results.schema.row import Row
from xmfu.harness.results.statistics import summary


def _written(n):
    """n matmul rows as written."""
    return [matmul_row(256 + 8 * i, 256, 256, backend=("torch", "jax")[i % 2]) for i in range(n)]


def _rows(n):
    return [typed(r) for r in _written(n)]


def test_the_mfu_plot_names_its_fields_once_not_once_per_row(monkeypatch):
    calls = []
    real = grouping.param_names
    monkeypatch.setattr(grouping, "param_names", lambda rows: calls.append(1) or real(rows))
    report_plots.mfu(_rows(120))
    assert len(calls) < 10  # the sort key called it once per row: 120+ scans of every row


def test_rows_without_a_bar_are_counted_without_comparing_rows(monkeypatch):
    compared = []

    class Counted(Row, kw_only=True):
        def __eq__(self, other):
            compared.append(1)
            return Row.__eq__(self, other)

        __hash__ = None

    rows = [msgspec.convert(r, Counted) for r in [*_written(40), {**matmul_row(64, 64, 64), "mfu": None}]]
    monkeypatch.setattr(report_plots, "_mfu_figure", lambda *a: "")
    html = report_plots.mfu(rows)
    assert "1 ok rows have no MFU bar" in html and not compared


def test_a_title_finds_what_varies_once_not_once_per_field(monkeypatch):
    rows = _rows(50)
    names = [*grouping.IDENTITY, *grouping.param_names(rows)]
    reads = []
    real = grouping.value
    monkeypatch.setattr(grouping, "value", lambda r, n: reads.append(1) or real(r, n))
    assert grouping.constant(rows, names).startswith("bf16, GPU A")
    assert len(reads) <= 2 * len(rows) * len(names)  # varying() per field read every row once per field more


def test_labels_count_repeats_in_linear_time():
    rows = [typed(matmul_row(256, 256, 256, run_id=f"r{i % 3}")) for i in range(6)]
    assert grouping.labels(rows)[0].endswith("(run r0)")


def test_validate_re_derives_a_bundles_time_statistics_in_one_batch(tmp_path, monkeypatch):
    bundle = write_bundle(tmp_path, "run", [matmul_row(256 + 8 * i, 256, 256) for i in range(24)])
    calls = []
    real = summary.summarize
    monkeypatch.setattr(times, "summarize", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert not load_bundle(bundle.folder).problems
    assert not calls  # one summarize (and one bootstrap) per row was a third of a 200-bundle report's time


def test_a_forged_statistic_is_refused_on_the_batched_path(tmp_path):
    rows = [{**matmul_row(256 + 8 * i, 256, 256), "run_id": "run"} for i in range(24)]
    rows[7]["time_s"] = {**rows[7]["time_s"], "p90": rows[7]["time_s"]["p90"] * 1.01}
    rows[9]["time_s"] = {**rows[9]["time_s"], "mean": rows[9]["time_s"]["mean"] * (1 + 1e-5)}
    writer = BundleWriter(tmp_path / "run", {**MANIFEST, "run_id": "run"}, "", {"packages": {}})
    for row in rows:
        writer.append(row, {"case_id": row["case_id"], "backend": row["backend"], "samples": samples_of(row)})
    writer.finalize("complete")
    problems = load_bundle(tmp_path / "run").problems
    assert [p.split(":")[0] for p in problems] == ["cases.jsonl line 8", "cases.jsonl line 10"], problems
    assert "time_s.p90" in problems[0] and "time_s.mean" in problems[1]


def _bundles(tmp_path, n):
    return [write_bundle(tmp_path, f"run-{i}", [matmul_row(256, 256, 256 + i)],
                         created=f"2026-11-{1 + i:02d}T00:00:00.000000Z") for i in range(n)]


def test_history_add_reads_the_stored_schemas_once_per_command(tmp_path, monkeypatch):
    pq = pytest.importorskip("pyarrow.parquet", exc_type=ImportError)
    bundles = _bundles(tmp_path, 6)
    store = tmp_path / "store"
    reads, flattened = [], []
    real_schema, real_flatten = pq.read_schema, parquet.flatten
    monkeypatch.setattr(pq, "read_schema", lambda *a, **k: reads.append(1) or real_schema(*a, **k))
    monkeypatch.setattr(parquet, "flatten", lambda *a: flattened.append(1) or real_flatten(*a))
    args = ["history", "add", *[str(b.folder) for b in bundles], "--store", str(store)]
    assert main(args) == 0 and len(list(store.glob("*.parquet"))) == 6
    assert not reads  # an empty store read once; per bundle it was 0 + 1 + ... + 5 reads
    reads.clear(), flattened.clear()
    assert main(args) == 0  # all stored already: one read of each file, none flattened
    assert len(reads) == 6 and not flattened
    assert len(parquet.load(store)) == 6


def test_export_holds_one_bundle_at_a_time(tmp_path, monkeypatch, capsys):
    pytest.importorskip("pyarrow", exc_type=ImportError)
    from xmfu.harness.results.bundle import reader, validator

    folders = [str(b.folder) for b in _bundles(tmp_path, 8)]
    live: list[weakref.ref] = []  # Bundle is an unhashable dataclass: refs in a list, counted alive
    most = [0]
    real_load, real_read, real_flat = validator.load_bundle, reader.read_bundle, export.flatten_row

    def load(folder, *a, **k):
        loaded = real_load(folder, *a, **k)
        live.append(weakref.ref(loaded.bundle))
        return loaded

    def read(folder):
        bundle = real_read(folder)
        live.append(weakref.ref(bundle))
        return bundle

    def flat(row, manifest):
        most[0] = max(most[0], sum(1 for ref in live if ref() is not None))
        return real_flat(row, manifest)

    monkeypatch.setattr(validator, "load_bundle", load)
    monkeypatch.setattr(reader, "read_bundle", read)
    monkeypatch.setattr(export, "flatten_row", flat)
    for name in ("rows.parquet", "rows.csv"):
        assert main(["export", *folders, "-o", str(tmp_path / name)]) == 0
        assert "export: 8 rows to" in capsys.readouterr().out
    assert 0 < most[0] <= 2  # every bundle was held until the end: 8
