"""Bundle round trip, and validate catching tampering, truncation and inconsistent counts."""

from __future__ import annotations

import json

import pytest

from tests.results.rows import untimed_row, valid_row
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.bundle.writer import BundleWriter
from xmfu.harness.results.schema import CASES, MANIFEST


def _row(status="ok", case_id="c1"):
    if status == "ok":
        return valid_row([1.0, 1.1], flops=2.0, peak=None, case_id=case_id)
    return untimed_row(status, case_id=case_id)


@pytest.fixture
def bundle(tmp_path):
    writer = BundleWriter(tmp_path / "run", {"run_id": "r", "created": "2026-11-23T00:00:00Z", "xmfu_version": "0",
                                           "git_sha": None,
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
    assert [r["case_id"] for r in b.raw_rows] == ["c1", "c2"]
    assert b.samples[0]["samples"] == [1.0, 1.1]


def test_unfinished_writer_leaves_a_valid_partial_bundle(tmp_path):
    writer = BundleWriter(tmp_path / "p", {"run_id": "r", "created": "2026-11-23T00:00:00Z", "xmfu_version": "0",
                                           "git_sha": None,
                                           "argv": [], "overrides": [], "comparability_key": "k"}, "", {})
    writer.append(_row(), {"case_id": "c1", "backend": "torch", "samples": [1.0, 1.1]})
    assert validate_bundle(tmp_path / "p") == []
    assert read_bundle(tmp_path / "p").manifest["status"] == "partial"


def test_tampered_file_fails_checksum(bundle):
    text = (bundle / CASES).read_text().replace('"bytes": 1.0', '"bytes": 9.0')
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
    manifest = {"run_id": "r", "created": "2026-11-23T00:00:00Z", "xmfu_version": "0", "git_sha": None, "argv": [],
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


def _rewrite(bundle, name, text):
    """Change a file and its checksum, as a careful forger would."""
    import hashlib

    (bundle / name).write_text(text)
    sums = (bundle / "SHA256SUMS").read_text().splitlines()
    digest = hashlib.sha256(text.encode()).hexdigest()
    (bundle / "SHA256SUMS").write_text("".join(
        f"{digest}  {name}\n" if line.endswith(f"  {name}") else line + "\n" for line in sums))


def test_a_consistent_forgery_of_a_figure_is_caught(bundle):
    rows = [json.loads(line) for line in (bundle / CASES).read_text().splitlines()]
    rows[0]["tflops"] *= 2  # checksums re-made: only the derived-figure check can see it
    _rewrite(bundle, CASES, "".join(json.dumps(r) + "\n" for r in rows))
    assert any("tflops" in p and "flops / median time" in p for p in validate_bundle(bundle))


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("tflops", "fast", "tflops: expected `float | null`, got `str`"),
    ("status", "great", "status: invalid enum value 'great'"),
    ("flops", -1, "flops: expected `float` >= 0.0"),
    ("run_id", "../x", "run_id: expected `str` matching regex"),
    ("tflops_per_second", 1.0, "unknown field `tflops_per_second`"),
])
def test_types_ranges_and_unknown_keys_are_checked_against_the_record(bundle, field, value, needle):
    rows = [json.loads(line) for line in (bundle / CASES).read_text().splitlines()]
    rows[0][field] = value
    _rewrite(bundle, CASES, "".join(json.dumps(r) + "\n" for r in rows))
    assert any(needle in p for p in validate_bundle(bundle)), validate_bundle(bundle)


def test_nan_tokens_and_unsafe_run_ids_are_refused(bundle):
    text = (bundle / CASES).read_text()
    _rewrite(bundle, CASES, text.replace('"reason": null', '"reason": NaN', 1))
    assert any("NaN is not JSON" in p for p in validate_bundle(bundle))
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest["run_id"] = "/abs/path"
    _rewrite(bundle, MANIFEST, json.dumps(manifest))
    assert any("manifest.json: run_id: expected `str` matching regex" in p for p in validate_bundle(bundle))


def test_links_and_devices_are_never_followed(bundle):
    (bundle / "telemetry.jsonl").unlink()
    (bundle / "telemetry.jsonl").symlink_to("/dev/zero")
    problems = validate_bundle(bundle)  # returns at once: /dev/zero is never read
    assert any("telemetry.jsonl: cannot be opened as a plain file" in p for p in problems)
    (bundle / "cases.jsonl").unlink()
    (bundle / "cases.jsonl").symlink_to(bundle.parent / "elsewhere.jsonl")
    assert any("cases.jsonl" in p for p in validate_bundle(bundle))


def test_the_published_schema_agrees_with_the_validator():
    """Every mutation of a valid row: jsonschema with the published (generated) schema and the validator's typed
    decoding reach the same verdict, so what the schema promises is what `xmfu validate` enforces."""
    jsonschema = pytest.importorskip("jsonschema")
    import msgspec

    from tests.results.rows import valid_row
    from xmfu.harness.results.schema.generate import bundle_schema
    from xmfu.harness.results.schema.row import Row

    schema = bundle_schema()
    checker = jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/Row"})

    def typed(candidate: dict) -> bool:
        try:
            msgspec.json.decode(msgspec.json.encode(candidate), type=Row)
        except msgspec.ValidationError:
            return False
        return True

    row = valid_row()
    # No integral float (2.0, 1e300) among them: JSON Schema counts it as an integer, the typed decoding refuses a float
    # where an int is declared (Python's json never writes one); that is the one place the validator is stricter.
    values = [None, True, 0, -1, 1.5, "x", "", [], {}, "../x", "ok", "failed", 1.5e-300]
    mutated = [row] + [{**row, key: value} for key in row for value in values]
    mutated += [{k: v for k, v in row.items() if k != key} for key in row]
    mutated += [{**row, "time_s": {**row["time_s"], key: value}} for key in row["time_s"] for value in values]
    mutated += [{**row, "undeclared": 1}, {**row, "time_s": {**row["time_s"], "undeclared": 1}}]
    for candidate in mutated:
        assert typed(candidate) == checker.is_valid(candidate), candidate
