"""The bundle format's records: declared once, with a meaning for every field; the published JSON Schema and the
docs' field tables generated from them and up to date; every bundle the project has committed still valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmfu.harness.results.schema import generate
from xmfu.harness.results.validator import validate_bundle

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
