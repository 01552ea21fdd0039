"""`xmfu import` refuses what no tool prints, naming where (issue 42 item 13): a nan, inf, negative or zero time,
a nan, inf or negative bandwidth, in a table line or a JSON result, and JSON nested past Python's recursion limit,
each one paragraph and exit 2 with nothing written, never a writer's RecordError, a ZeroDivisionError, a
RecursionError or a bundle that `xmfu validate` then rejects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.results.importers.test_import_logs import LOGS, RCCL_JSON, _nccl_json
from xmfu.harness.cli.main import main
from xmfu.harness.results.importers import LogError, nccl_tests

H100 = "nccl-tests_h100_16ranks.txt"
ROW = ("           8             2     float     sum      -1    135.8    0.00    0.00      0    123.5    0.00    0.00"
       "      0")


def _refused(tmp_path: Path, capsys, text: str, name: str = "log.txt") -> str:
    log = tmp_path / name
    log.write_text(text)
    code = main(["import", "nccl-tests", str(log), "--results-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "\n" not in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())  # nothing half-made
    return err


@pytest.mark.parametrize(("column", "value", "allowed"), [
    ("135.8", "nan", "> 0"), ("135.8", "inf", "> 0"), ("135.8", "-135.8", "> 0"), ("135.8", "0", "> 0"),
    ("135.8", "0.00", "> 0"), ("123.5    0.00    0.00", "123.5    0.00     nan", ">= 0"),
    ("123.5    0.00    0.00", "123.5     inf    0.00", ">= 0"),
    ("123.5    0.00    0.00", "123.5    0.00   -1.00", ">= 0"),
])
def test_a_table_line_with_a_figure_no_tool_prints_is_refused_by_its_number(tmp_path, capsys, column, value, allowed):
    text = (LOGS / H100).read_text()
    assert ROW in text
    number = text[:text.index(ROW)].count("\n") + 1
    err = _refused(tmp_path, capsys, text.replace(ROW, ROW.replace(column, value, 1)))
    assert f"line {number}: the " in err and f"Allowed: a finite number {allowed}" in err, err


@pytest.mark.parametrize(("field", "value", "allowed"), [("time", float("nan"), "> 0"), ("time", 0.0, "> 0"),
                                                         ("bus_bw", float("nan"), ">= 0"),
                                                         ("alg_bw", float("-inf"), ">= 0")])
def test_a_json_result_with_a_figure_no_tool_prints_is_refused_by_its_number(tmp_path, capsys, field, value, allowed):
    data = json.loads(_nccl_json(H100, 16, 1))
    data["results"][2]["in_place"][field] = value  # json writes NaN and -Infinity, as a forged file may hold
    err = _refused(tmp_path, capsys, json.dumps(data), "out.json")
    assert "result 3: the in-place" in err and f"Allowed: a finite number {allowed}" in err, err


def test_an_rccl_json_result_with_a_zero_time_is_refused_by_its_number(tmp_path, capsys):
    lines = (LOGS / RCCL_JSON).read_text().splitlines()
    record = json.loads(lines[1])
    lines[1] = json.dumps({**record, "time": 0})
    err = _refused(tmp_path, capsys, "\n".join(lines) + "\n", "out.json")
    assert "result 2: the in-place time (us) is 0" in err, err


@pytest.mark.parametrize("kind", ["nccl", "rccl"])
def test_json_nested_past_the_recursion_limit_is_refused_not_a_recursion_error(tmp_path, capsys, kind):
    deep = "[" * 200_000 + "]" * 200_000
    text = '{"results": ' + deep + "}" if kind == "nccl" else deep
    err = _refused(tmp_path, capsys, text, "out.json")
    assert "nested deeper" in err, err


def test_a_zero_rank_count_is_refused_not_a_division_by_zero():
    data = json.loads(_nccl_json(H100, 16, 1))
    data["config"]["ngpus"] = 0
    with pytest.raises(LogError, match="rank count is 0"):
        nccl_tests.parse(json.dumps(data))


def test_a_log_of_more_rows_than_an_import_takes_is_refused_before_its_rows_are_built(tmp_path, capsys, monkeypatch):
    """issue 42 item 14: a 580,000-line log never finished; the bound is monkeypatched small here."""
    from xmfu.harness.results import importers
    from xmfu.harness.results.importers import rows

    monkeypatch.setattr(importers, "MAX_ROWS", 40)
    built = []
    monkeypatch.setattr(rows, "nccl_rows", lambda *a: built.append(a) or [])
    err = _refused(tmp_path, capsys, (LOGS / H100).read_text())  # 31 lines, 62 rows
    assert "more than the 40 rows one import takes" in err and "split it" in err, err
    assert built == []


def test_a_log_file_larger_than_an_import_reads_is_refused_unread(tmp_path, capsys, monkeypatch):
    from xmfu.harness.results.bundle import imported

    monkeypatch.setattr(imported, "MAX_LOG_BYTES", 1000)
    err = _refused(tmp_path, capsys, (LOGS / H100).read_text())
    assert "bytes, over the 1000 bytes one import reads" in err, err


def test_an_import_writes_its_rows_with_one_sync_not_one_per_row(tmp_path, monkeypatch):
    """A sync (an fsync and two renames) per row made 4,000 rows take 90 s; an import is written at once."""
    from xmfu.harness.results.bundle.imported import write
    from xmfu.harness.results.bundle.writer import BundleWriter

    syncs = []
    real = BundleWriter._sync
    monkeypatch.setattr(BundleWriter, "_sync", lambda self: syncs.append(1) or real(self))
    folder = write("nccl-tests", LOGS / H100, tmp_path, ["xmfu"], "t")
    assert len((folder / "cases.jsonl").read_text().splitlines()) == 62
    assert len(syncs) <= 4, len(syncs)  # created, the log attached, the rows, finalized
