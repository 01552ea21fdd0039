"""A suite's folder is a BUNDLE for every command that reads bundles (issue 42 item 9): `export`, `archive` and
`history add` took it, while `compare`, `compare --references`, `report` and `validate` said "missing
manifest.json", though docs/nightly.md says a BUNDLE may be a suite's folder."""

from __future__ import annotations

import json

from tests.results.rows import matmul_row, write_bundle
from xmfu.harness.cli.main import main


def _suite(tmp_path):
    """A finished suite's folder: suite.json at its top, a node.json per host, a bundle per part."""
    suite = tmp_path / "suite1"
    for part, size in (("matmul", 512), ("matmul-fp32", 256)):
        (suite / "host0" / part).mkdir(parents=True)
        write_bundle(suite / "host0" / part, f"run-{size}", [matmul_row(size, size, size)])
    (suite / "host0" / "node.json").write_text("{}\n")
    (suite / "suite.json").write_text(json.dumps({"verdict": "PASS"}) + "\n")
    return suite


def test_validate_report_and_compare_read_every_bundle_of_a_suites_folder(tmp_path, capsys):
    suite = _suite(tmp_path)
    assert main(["validate", str(suite)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "not re-derived" not in line]
    assert said == [f"{suite / 'host0' / 'matmul'}/run-512: valid",
                    f"{suite / 'host0' / 'matmul-fp32'}/run-256: valid"]
    assert main(["compare", "--references", str(suite), "--format", "json"]) == 0
    assert main(["report", str(suite), "-o", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "run-512" in page and "run-256" in page
    other = write_bundle(tmp_path, "other", [matmul_row(512, 512, 512)])
    capsys.readouterr()
    assert main(["compare", str(suite), str(other.folder), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"]  # the suite's 512^3 row matched the other bundle's


def test_a_suites_folder_without_bundles_or_with_a_bad_one_is_named(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "suite.json").write_text("{}\n")
    assert main(["report", str(empty), "-o", str(tmp_path / "r.html")]) == 2
    assert "is a suite's folder with no bundle in it yet" in capsys.readouterr().err
    assert main(["validate", str(empty)]) == 1
    assert "a suite's folder with no bundle in it yet" in capsys.readouterr().out
    suite = _suite(tmp_path)
    (suite / "host0" / "matmul" / "run-512" / "cases.jsonl").write_text("{}\n")
    assert main(["validate", str(suite)]) == 1
    out = capsys.readouterr().out
    assert f"{suite / 'host0' / 'matmul'}/run-512: " in out
    assert f"{suite / 'host0' / 'matmul-fp32'}/run-256: valid" in out
    assert main(["compare", "--references", str(suite)]) == 2
    assert "run-512 is not a valid bundle" in capsys.readouterr().err
