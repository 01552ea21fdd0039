"""The bundle format's records: declared once, with a meaning for every field; the published JSON Schema and the
docs' field tables generated from them and up to date; every bundle the project has committed still valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.schema import generate

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = sorted(p.parent for p in (ROOT / "results" / "reference").glob("*/*/manifest.json"))


def test_the_published_schema_and_the_docs_tables_are_generated_and_current(capsys):
    assert generate.main(["--check"]) == 0, capsys.readouterr().out


def test_every_field_of_every_record_says_what_it_means():
    defs = generate.bundle_schema()["$defs"]
    missing = [f"{name}.{field}" for name, node in defs.items() for field, prop in node["properties"].items()
               if not prop.get("description")]
    assert not missing, missing
    assert all(node.get("description") for node in defs.values())


def test_the_records_refuse_keys_they_do_not_declare():
    defs = generate.bundle_schema()["$defs"]
    for name in ("Row", "Manifest", "Samples", "Reading", "NodeRecord", "TimeStats", "Timer", "Speedup"):
        assert defs[name]["additionalProperties"] is False, name
    # What a vendor library reports may grow a key on a machine xmfu has not met: those records keep it.
    assert {name for name, node in defs.items() if node.get("additionalProperties") is not False} == {
        "Clocks", "Contention", "Telemetry", "Drift"}


def test_the_field_tables_list_every_row_field():
    tables = generate.field_tables()
    for field in generate.bundle_schema()["$defs"]["Row"]["properties"]:
        assert f"| `{field}`" in tables, field


@pytest.mark.parametrize("bundle", REFERENCE, ids=[p.name for p in REFERENCE])
def test_the_committed_reference_bundles_still_validate(bundle):
    """They were written as xmfu.bundle/1: the typed records read them (the fields added since are optional)."""
    assert validate_bundle(bundle) == []


def _published() -> dict:
    import json

    return json.loads(generate.SCHEMA_FILE.read_text())


def _lines(path: Path) -> list:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("bundle", REFERENCE[:1] + [b for b in REFERENCE if "inference" in b.name][:1],
                         ids=lambda p: p.name)
def test_the_root_of_the_published_schema_accepts_every_file_of_a_real_bundle(bundle):
    """Issue 30, item 13: `check-jsonschema --schemafile xmfu.bundle-2.schema.json FILE` validates against the
    root, which had no constraint of its own (it accepted anything). The root now dispatches to the file records."""
    jsonschema = pytest.importorskip("jsonschema")
    import json

    checker = jsonschema.Draft202012Validator(_published())
    records = [json.loads((bundle / "manifest.json").read_text())]
    for name in ("cases.jsonl", "samples.jsonl", "telemetry.jsonl"):
        if (bundle / name).exists():
            records += _lines(bundle / name)[:20]
    assert len(records) > 3
    for record in records:
        assert not list(checker.iter_errors(record)), record


def test_the_root_of_the_published_schema_refuses_garbage_and_files_of_no_record():
    jsonschema = pytest.importorskip("jsonschema")
    import json

    checker = jsonschema.Draft202012Validator(_published())
    bundle = REFERENCE[0]
    row = _lines(bundle / "cases.jsonl")[0]
    manifest = json.loads((bundle / "manifest.json").read_text())
    wrong = [{}, {"anything": 1}, [], "text", 3, None,
             json.loads((bundle / "environment.json").read_text()),  # a bundle file the schema does not describe
             {**manifest, "case_id": row["case_id"]},  # a manifest with a row's key
             {k: v for k, v in row.items() if k != "status"}]  # a row missing a required field
    for record in wrong:
        assert list(checker.iter_errors(record)), record


def test_one_kind_of_file_is_checked_against_its_own_definition():
    """What docs/bundle.md says to do where a file must be of one kind: `$ref` the record's definition. A
    manifest is then refused as a row."""
    jsonschema = pytest.importorskip("jsonschema")
    import json

    schema = _published()
    bundle = REFERENCE[0]
    manifest = json.loads((bundle / "manifest.json").read_text())
    as_row = jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/Row"})
    assert list(as_row.iter_errors(manifest))
    assert not list(as_row.iter_errors(_lines(bundle / "cases.jsonl")[0]))
