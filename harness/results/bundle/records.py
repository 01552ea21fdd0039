"""A bundle's JSON records decoded against their typed declarations (schema/row.py, schema/records.py): strict
JSON (no NaN or Infinity tokens), a bounded nesting depth, every key declared and none other, types and ranges; each
record handed back as plain JSON values (what the re-derivation reads) and as its typed record (what `Bundle.rows`
gives readers), each line decoded once: a samples line into its typed record, its plain value built from it; any other
line into plain values, its typed record converted from them (sharing their strings and numbers)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import msgspec

from xmfu.harness.results.bundle.files import Rejected
from xmfu.harness.results.schema.records import Manifest, Reading, Samples
from xmfu.harness.results.schema.row import Row

MAX_DEPTH = 64  # deepest nesting of arrays and objects a record may have; xmfu writes a handful of levels
RECORDS: dict[str, type[msgspec.Struct]] = {"manifest": Manifest, "row": Row, "samples": Samples,
                                            "reading": Reading}
_DECODERS = {kind: msgspec.json.Decoder(record) for kind, record in RECORDS.items()}
_PLAIN = msgspec.json.Decoder()


def record(kind: str, raw: bytes | str, where: str) -> tuple[Any, list[str]]:
    """The record as plain JSON values (what readers get), and its problems: strict JSON (msgspec refuses NaN and
    Infinity tokens), then its typed declaration (every key declared, none other, types and ranges)."""
    value, _, problems = decoded(kind, raw, where)
    return value, problems


def decoded(kind: str, raw: bytes | bytearray | memoryview | str, where: str,
            brackets: int | None = None) -> tuple[Any, msgspec.Struct | None, list[str]]:
    """`record`'s (value, problems) with the typed record between them (None where it does not fit): a row's is
    what `Bundle.rows` hands its readers, made here once rather than again when they ask.
    `brackets`: how many `[` and `{` the line holds, where the caller counted them (`jsonl`, in the file's buffer)."""
    data = raw.encode() if isinstance(raw, str) else raw
    # A parser recurses per level (msgspec and json raise RecursionError past Python's limit); the count of opening
    # brackets bounds the depth, so most lines need no scan.
    if brackets is None:
        counted = bytes(data) if isinstance(data, memoryview) else data
        brackets = counted.count(b"[") + counted.count(b"{")
    if brackets > MAX_DEPTH and nesting_depth(data) > MAX_DEPTH:
        raise Rejected(f"{where}: nested deeper than {MAX_DEPTH} levels of arrays and objects (no bundle record is)")
    if kind in FROM_TYPED:
        try:
            record = _DECODERS[kind].decode(raw)
        except msgspec.ValidationError:
            pass  # valid JSON or not, the path below finds which and says so
        except msgspec.DecodeError as exc:
            raise Rejected(f"{where}: not valid JSON ({_why_not_json(bytes(data), exc)})"[:300]) from None
        else:
            return _plain(record), record, []
    try:
        value = _PLAIN.decode(raw)
    except msgspec.DecodeError as exc:
        raise Rejected(f"{where}: not valid JSON ({_why_not_json(bytes(data), exc)})"[:300]) from None
    try:  # the typed record from the plain value: its strings and numbers shared, not decoded again (a row's
        # typed record took 35 MB of a 4,000-row bundle decoded from the line, 16 MB converted; msgspec's messages
        # are the same either way)
        record = msgspec.convert(value, RECORDS[kind])
    except msgspec.ValidationError as exc:
        return value, None, [f"{where}: {_located(str(exc))}"[:300]]
    return value, record, []


# Records whose plain value is built from the typed one where it fits, rather than decoded a second time: a
# samples.jsonl line is mostly lists of floats, which the typed record holds as the plain decoder would (the same
# list objects, a JSON integer as its float), and every field the line leaves out reads as its declared default
# (None or []), which is what every reader's `.get(key)` or `or []` takes an absent key for. Not rows: a row as
# written keeps an absent key absent (export, the history store).
FROM_TYPED = frozenset({"samples"})


def _plain(record: msgspec.Struct) -> dict[str, Any]:
    """The typed record's fields as a dict, a nested record (a variant's samples) as plain data too."""
    fields = msgspec.structs.asdict(record)
    for key, value in fields.items():
        if isinstance(value, (dict, msgspec.Struct)):
            fields[key] = msgspec.to_builtins(value)
    return fields


_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a JSON string (skipped whole), or a bracket


def nesting_depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in `raw`, without parsing it (so without recursing). Brackets inside
    strings do not count; on malformed text the figure is an upper bound of what a parser would reach."""
    depth = deepest = 0
    for token in _TOKENS.finditer(raw):
        t = token.group()
        if t in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif t in (b"]", b"}"):
            depth = max(depth - 1, 0)
    return deepest


def _why_not_json(raw: bytes | str, exc: Exception) -> str:
    """Name a NaN or Infinity token, which Python's json writes by default and JSON does not have."""
    def refuse(token: str) -> Any:
        raise Rejected(f"{token} is not JSON (bundles are strict JSON)")

    try:
        json.loads(raw, parse_constant=refuse)
    except Rejected as found:
        return str(found)
    except ValueError:
        pass
    return str(exc)


def _located(message: str) -> str:
    """msgspec's `Expected `int`, got `str` - at `$.time_s.n`` as `time_s.n: expected `int`, got `str``."""
    text, _, at = message.rpartition(" - at `$")
    if not text:
        return message
    path = at.rstrip("`").lstrip(".") or "(record)"
    return f"{path}: {text[:1].lower()}{text[1:]}"


def jsonl(name: str, raw: bytes, kind: str) -> tuple[list[dict], list[str], list[Any] | None]:
    """(the lines' plain values, their problems, their typed records: None unless every line has one)."""
    records, problems, typed = [], [], []
    if raw and not raw.endswith(b"\n"):
        problems.append(f"{name}: last line is incomplete (truncated)")
    for number, (line, brackets) in enumerate(_lines(raw), 1):
        try:
            record, as_typed, found = decoded(kind, line, f"{name} line {number}", brackets)
        except Rejected as exc:
            problems.append(str(exc))
            continue
        problems += found
        records.append(record)
        typed.append(as_typed)
    return records, problems, (typed if all(t is not None for t in typed) else None)


def _lines(raw: bytes) -> Iterator[tuple[bytes | memoryview, int]]:
    """Each line of `raw` as bytes.splitlines() divides it, with the count of `[` and `{` it holds. Where lines end
    at \\n alone (as xmfu writes them), each is a view of `raw`, not a copy (a 4,000-row cases.jsonl is 20 MB)."""
    if b"\r" in raw:  # \\r and \\r\\n end lines too: not what xmfu writes, read as splitlines reads them
        yield from ((line, line.count(b"[") + line.count(b"{")) for line in raw.splitlines())
        return
    view, at, size = memoryview(raw), 0, len(raw)
    while at < size:
        end = raw.find(b"\n", at)
        end = size if end < 0 else end
        yield view[at:end], raw.count(b"[", at, end) + raw.count(b"{", at, end)
        at = end + 1
