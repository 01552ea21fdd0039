"""`xmfu export`: bundles flattened to one row per case and backend, read back with pandas."""

from __future__ import annotations

import json

import pytest

from tests.results.rows import attention_row, collectives_row, matmul_row, write_bundle
from xmfu.harness.cli.main import main
from xmfu.harness.results.render import export


def test_flat_columns_one_level_deep():
    row = {**matmul_row(256, 256, 256), "notes": {"library": "torch", "rank_map": [["vm", 0]]}}
    flat = export.flatten_row(row, {"created": "2026-11-23T00:00:00Z", "git_sha": "abc", "xmfu_version": "0.1"})
    assert flat["time_s_median"] == row["time_s"]["median"] and flat["params_m"] == 256
    assert flat["tflops_ci95_low"] == row["tflops_ci95"][0] and "tflops_ci95" not in flat
    assert flat["notes_library"] == "torch" and json.loads(flat["notes_rank_map"]) == [["vm", 0]]
    assert flat["git_sha"] == "abc" and flat["created"] == "2026-11-23T00:00:00Z"


def test_two_bundles_to_parquet_and_csv_read_back_with_pandas(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow", exc_type=ImportError)  # pyarrow 2x on numpy 1.x raises ImportError
    a = write_bundle(tmp_path, "a", [matmul_row(256, 256, 256), {**matmul_row(512, 512, 512), "throughput": {
        "tokens_per_s": 10.0}}], created="2026-11-01T00:00:00.000000Z")
    b = write_bundle(tmp_path, "b", [collectives_row(1024), attention_row(128, True, "fwd_bwd")],
                     created="2026-11-02T00:00:00.000000Z")
    for name in ("rows.parquet", "rows.csv"):
        assert main(["export", str(a.folder), str(b.folder), "-o", str(tmp_path / name)]) == 0
    assert "export: 4 rows to" in capsys.readouterr().out
    frames = [pd.read_parquet(tmp_path / "rows.parquet"), pd.read_csv(tmp_path / "rows.csv")]
    for frame in frames:
        assert len(frame) == 4 and list(frame["run_id"]) == ["a", "a", "b", "b"]
        assert frame["time_s_median"].dtype == "float64" and frame["tflops"].isna().sum() == 1
        assert frame["params_causal"].dropna().tolist() == [True] and frame["throughput_tokens_per_s"].max() == 10
    parquet = frames[0]
    assert str(parquet["created"].dtype) == "datetime64[us, UTC]" and parquet["timing_valid"].dtype == bool
    assert parquet["params_m"].dropna().tolist() == [256, 512]


def test_unknown_suffix_or_missing_folder_is_exit_2(tmp_path, capsys):
    bundle = write_bundle(tmp_path, "a", [matmul_row(256, 256, 256)])
    assert main(["export", str(bundle.folder), "-o", str(tmp_path / "rows.xlsx")]) == 2
    assert "unknown suffix '.xlsx'. Allowed: .parquet, .csv" in capsys.readouterr().err
    assert main(["export", str(bundle.folder), "-o", str(tmp_path / "no" / "rows.csv")]) == 2
    assert f"the folder {tmp_path / 'no'} does not exist" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nothing"), "-o", str(tmp_path / "rows.csv")]) == 2
    assert "is not a valid bundle" in capsys.readouterr().err


def _results_tree(tmp_path):
    """What `results/*/` catches after a suite and a run (issue 30): a bundle, a suite's folder (its bundles in a
    host's part folder, a node.json beside them), and results/reference/ (folders of bundles, no bundle itself)."""
    results = tmp_path / "results"
    (results / "reference" / "cpu").mkdir(parents=True)
    write_bundle(results, "run1", [matmul_row(256, 256, 256)])
    part = results / "suite1" / "host0" / "matmul"
    part.mkdir(parents=True)
    write_bundle(part, "run2", [matmul_row(512, 512, 512)])
    (results / "suite1" / "host0" / "node.json").write_text("{}\n")
    write_bundle(results / "reference" / "cpu", "ref", [matmul_row(128, 128, 128)])
    return results


def test_export_takes_suite_folders_and_skips_non_bundles_of_a_glob(tmp_path, capsys):
    results = _results_tree(tmp_path)
    paths = sorted(str(p) + "/" for p in results.iterdir())  # as the shell expands results/*/
    assert main(["export", *paths, "-o", str(tmp_path / "rows.csv")]) == 0
    out = capsys.readouterr()
    assert "export: 2 rows to" in out.out
    assert f"skipped {results / 'reference'}/: not a bundle" in out.err
    # a lone path that is not a bundle is still refused, naming it
    assert main(["export", str(results / "reference"), "-o", str(tmp_path / "rows.csv")]) == 2


def test_history_add_validates_every_bundle_before_adding_any(tmp_path, capsys):
    pytest.importorskip("pyarrow", exc_type=ImportError)
    results = _results_tree(tmp_path)
    write_bundle(results, "zbad", [matmul_row(64, 64, 64)])
    (results / "zbad" / "cases.jsonl").write_text("{}\n")  # the glob's last bundle no longer validates
    store = tmp_path / "store"
    paths = [str(results / name) for name in ("run1", "suite1", "zbad")]  # two good ones before the bad one
    assert main(["history", "add", *paths, "--store", str(store)]) == 2
    assert "zbad is not a valid bundle" in capsys.readouterr().err
    assert not list(store.rglob("*.parquet"))  # nothing added: all or nothing


def test_a_key_no_row_wrote_is_no_column():
    """Export flattens the rows as written (Bundle.raw_rows), not their records: a time written without `cv` (older
    bundles) gives no time_s_cv column, where its record would give it the default 0.0."""
    from pathlib import Path

    from xmfu.harness.results.bundle.reader import Bundle

    row = matmul_row(256, 256, 256)
    row = {**row, "time_s": {k: v for k, v in row["time_s"].items() if k != "cv"}}
    bundle = Bundle(Path("."), {"run_id": row["run_id"], "created": "2026-11-23T00:00:00Z"}, [row], [])
    assert bundle.rows[0].time_s.cv == 0.0
    flat = export.rows([bundle])
    assert "time_s_cv" not in export.columns(flat) and "time_s_median" in export.columns(flat)
    assert export.cell(flat[0], "time_s_cv") is None and export.cell(flat[0], "git_sha") is None
