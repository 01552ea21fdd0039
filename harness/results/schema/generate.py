"""The published JSON Schema and the field tables of docs/bundle.md, generated from the typed records.

    python -m xmfu.harness.results.schema.generate            # rewrite the schema file and the docs' tables
    python -m xmfu.harness.results.schema.generate --check    # exit 1 when either is out of date (a test runs it)

The schema is msgspec's JSON Schema 2020-12 of the records (`msgspec.json.schema_components`), with one
definition per record under `$defs`; rows, manifests and samples are `$defs/Row`, `$defs/Manifest` and
`$defs/Samples`. Nothing in it is written by hand. Its root is `anyOf` the file records (RECORDS), so a validator
given only the file (check-jsonschema --schemafile, jsonschema.validate) checks a record of any of a bundle's files
against its definition and refuses anything else; a root without a constraint of its own accepted any JSON value
(JSON Schema 2020-12 Core, section 4.3.2: `{}` always passes, as `true` does). The records are closed (a key they do not
declare is refused), so no value matches two of them. Where a file must be of one kind, `$ref` its definition.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from xmfu.harness.results.schema.generated import write_or_check
from xmfu.harness.results.schema.records import SCHEMA, ArchiveManifest, Manifest, NodeRecord, Reading, Samples
from xmfu.harness.results.schema.row import Row

SCHEMA_FILE = Path(__file__).parent / "xmfu.bundle-2.schema.json"
RECORDS = {"Row": Row, "Manifest": Manifest, "Samples": Samples, "Reading": Reading, "NodeRecord": NodeRecord,
           "ArchiveManifest": ArchiveManifest}
FILES = {"Manifest": "manifest.json", "Row": "cases.jsonl (one per line)", "Samples": "samples.jsonl (one per line)",
         "Reading": "telemetry.jsonl (one per line)", "NodeRecord": "a suite's <host>/node.json",
         "ArchiveManifest": "xmfu-archive.json, at the top of an archive (xmfu archive)"}
BEGIN, END = "<!-- BEGIN generated: bundle fields -->", "<!-- END generated: bundle fields -->"


def bundle_schema() -> dict[str, Any]:
    """The JSON Schema of every record of a bundle, as published in SCHEMA_FILE."""
    _, defs = msgspec.json.schema_components(list(RECORDS.values()), ref_template="#/$defs/{name}")
    for node in defs.values():  # a record's docstring: msgspec 0.23 cleans its indentation, 0.22 keeps it
        if "description" in node:
            node["description"] = inspect.cleandoc(node["description"])
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://xmfu.dev/schema/{SCHEMA.replace('/', '-')}.schema.json",
            "title": f"xmfu result bundle, schema {SCHEMA}",
            "description": ("The records of a bundle folder, generated from xmfu's typed records: " + "; ".join(
                f"{FILES[name]}: $defs/{name}" for name in RECORDS) + ". The root accepts a record of any of "
                "these (anyOf); to require one kind, validate against its definition. A key a record does not "
                "declare is refused. Derived figures (tflops, mfu, counts) are cross-checked by xmfu validate "
                "beyond what a schema can say."),
            "anyOf": [{"$ref": f"#/$defs/{name}"} for name in RECORDS],
            "$defs": dict(sorted(defs.items()))}


def schema_text() -> str:
    return json.dumps(bundle_schema(), indent=1, sort_keys=False) + "\n"


def _type(node: dict[str, Any]) -> str:
    """A short type for the docs: number >= 0, integer, string, a linked record, `x or null`, one of a, b."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in node:
        return " or ".join(_type(n) for n in node["anyOf"])
    if "enum" in node:
        return "one of " + ", ".join(str(v) for v in node["enum"])
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    bounds = [f"{sign} {node[key]:g}" for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                        ("maximum", "<="), ("exclusiveMaximum", "<")) if key in node]
    return " ".join([{"object": "map"}.get(kind, kind), *bounds])


def _table(name: str, node: dict[str, Any]) -> str:
    required = set(node.get("required", ()))
    lines = [f"### {name}", "", node.get("description", ""), ""]
    if name in FILES:
        lines[2] = f"{FILES[name]}. {lines[2]}"
    if node.get("additionalProperties") is not False:
        lines.append("Keys beyond these are kept (a vendor library's report can grow one).\n")
    lines += ["| field | type | meaning |", "|---|---|---|"]
    for field, prop in node.get("properties", {}).items():
        flag = "" if field in required else " (optional)"
        meaning = prop.get("description", "").replace("|", "\\|")
        lines.append(f"| `{field}`{flag} | {_type(prop)} | {meaning} |")
    return "\n".join(lines) + "\n"


def field_tables() -> str:
    """Markdown: one table per record, the bundle's files first, then the nested records."""
    defs = bundle_schema()["$defs"]
    order = [*RECORDS, *(n for n in defs if n not in RECORDS)]
    return "\n".join(_table(name, defs[name]) for name in order)


def docs_with_tables(text: str) -> str:
    """docs/bundle.md with the text between its markers replaced by the current tables."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"docs/bundle.md lacks the markers {BEGIN} ... {END}")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{field_tables()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xmfu.harness.results.schema.generate")
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated file is out of date")
    parser.add_argument("--docs", default=str(Path(__file__).resolve().parents[3] / "docs" / "bundle.md"),
                        help="the docs page holding the field tables (a checkout's docs/bundle.md)")
    ns = parser.parse_args(argv)
    docs = Path(ns.docs)
    wanted = {SCHEMA_FILE: schema_text()}
    if docs.exists():
        wanted[docs] = docs_with_tables(docs.read_text())
    return write_or_check(wanted, "python -m xmfu.harness.results.schema.generate", ns.check)


if __name__ == "__main__":
    sys.exit(main())
