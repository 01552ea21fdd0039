"""Bundle round trip, and validate catching tampering, truncation and inconsistent counts."""

from __future__ import annotations

import json

import pytest

from harness.results.reader import read_bundle
from harness.results.schema import CASES, MANIFEST
from harness.results.validator import validate_bundle
from harness.results.writer import BundleWriter


def _row(status="ok", case_id="c1"):
    return {"run_id": "r", "case_id": case_id, "workload": "matmul", "backend": "torch", "platform": "cpu",
            "device": "cpu", "dtype": "fp32", "params": {"m": 1}, "status": status, "reason": None, "flops": 2.0,
            "flop_convention": "x", "bytes": 1.0, "time_s": {"median": 1.0}, "tflops": 1e-12,
            "peak_tflops": None, "peak_source": None, "mfu": None, "mfu_vs_achievable": None,
            "timing_valid": True, "comparability_key": "k"}


@pytest.fixture
def bundle(tmp_path):
    writer = BundleWriter(tmp_path / "run", {"run_id": "r", "created": "now", "xmfu_version": "0", "git_sha": None,
                                             "argv": [], "overrides": [], "comparability_key": "k"},
                          "a: 1\n", {"host": {}})
    writer.append(_row(), {"case_id": "c1", "backend": "torch", "samples": [1.0, 1.1]})
    writer.append(_row("skipped", "c2"), {"case_id": "c2", "backend": "torch", "samples": []})
    writer.finalize("complete")
    return tmp_path / "run"


def test_round_trip(bundle):
    assert validate_bundle(bundle) == []
    b = read_bundle(bundle)
    assert b.manifest["status"] == "complete"
    assert b.manifest["counts"] == {"ok": 1, "skipped": 1, "incorrect": 0, "failed": 0}
    assert [r["case_id"] for r in b.cases] == ["c1", "c2"]
    assert b.samples[0]["samples"] == [1.0, 1.1]


def test_unfinished_writer_leaves_a_valid_partial_bundle(tmp_path):
    writer = BundleWriter(tmp_path / "p", {"run_id": "r", "created": "now", "xmfu_version": "0", "git_sha": None,
                                           "argv": [], "overrides": [], "comparability_key": "k"}, "", {})
    writer.append(_row(), {"case_id": "c1", "backend": "torch", "samples": [1.0]})
    assert validate_bundle(tmp_path / "p") == []
    assert read_bundle(tmp_path / "p").manifest["status"] == "partial"


def test_tampered_file_fails_checksum(bundle):
    text = (bundle / CASES).read_text().replace('"tflops": 1e-12', '"tflops": 9e-12')
    (bundle / CASES).write_text(text)
    assert any("checksum mismatch" in p for p in validate_bundle(bundle))


def test_truncated_file_is_caught(bundle):
    data = (bundle / CASES).read_bytes()
    (bundle / CASES).write_bytes(data[: len(data) - 40])
    problems = validate_bundle(bundle)
    assert any("checksum" in p for p in problems)
    assert any("truncated" in p or "not valid JSON" in p for p in problems)


def test_missing_file_and_bad_manifest(bundle):
    (bundle / "samples.jsonl").unlink()
    assert validate_bundle(bundle) == ["missing file samples.jsonl"]


def test_counts_must_match_rows(bundle):
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["counts"]["ok"] = 5
    (bundle / MANIFEST).write_text(json.dumps(manifest))
    problems = validate_bundle(bundle)
    assert any("counts" in p for p in problems) and any("checksum" in p for p in problems)


def test_attachments_are_covered_by_the_checksums(tmp_path):
    manifest = {"run_id": "r", "created": "now", "xmfu_version": "0", "git_sha": None, "argv": [],
                "overrides": [], "comparability_key": "k"}
    writer = BundleWriter(tmp_path / "b", manifest, "", {})
    writer.attach("tunableop_results.csv", "Validator,PT_VERSION,2.13.0\n")
    writer.finalize("complete")
    assert validate_bundle(tmp_path / "b") == [] and writer.manifest["attachments"] == ["tunableop_results.csv"]
    (tmp_path / "b" / "tunableop_results.csv").write_text("edited")
    assert any("tunableop_results.csv: checksum mismatch" in p for p in validate_bundle(tmp_path / "b"))
    for bad in ("../escape.csv", "sub/dir.csv", ".hidden", "cases.jsonl", ""):
        with pytest.raises(ValueError):
            writer.attach(bad, "x")
