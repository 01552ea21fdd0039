"""`xmfu export`: bundles flattened to one row per case and backend, read back with pandas."""

from __future__ import annotations

import json

import pytest

from tests.results.rows import attention_row, collectives_row, matmul_row, write_bundle
from xmfu.harness.cli.main import main
from xmfu.harness.results import export


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
