"""`xmfu validate`: is a folder a complete, untouched xmfu bundle (`xmfu.bundle/2`, or `/1` of earlier
versions)? Every problem, by name.

Every command that reads bundles (compare, report, history add, export) loads them through `load_bundle`, which
validates as it reads, so nothing a bundle holds is trusted before it is checked:
- the files: regular files inside the folder, opened without following a link and never a device (a
  `telemetry.jsonl` linked to /dev/zero must not hang a reader), each read once, within a size limit;
- the checksums in SHA256SUMS;
- the records, against their typed declarations (schema/row.py, schema/records.py; the published JSON Schema
  schema/xmfu.bundle-2.schema.json is generated from them): every key declared, none other, types, ranges,
  statuses, a run id that is a plain folder name; strict JSON (no NaN or Infinity tokens);
- the derived figures, which a consistent forgery would also have to get right: tflops = flops / median time,
  mfu = tflops / peak_tflops, the manifest's counts by status, one samples record per row, finite samples.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from xmfu.harness.results.reader import Bundle
from xmfu.harness.results.schema import (
    ACCEPTED_SCHEMAS,
    CASES,
    MANIFEST,
    REQUIRED_FILES,
    ROW_STATUSES,
    SAMPLES,
    SUMS,
    TELEMETRY,
)
from xmfu.harness.results.schema.records import Manifest, Reading, Samples
from xmfu.harness.results.schema.row import Row

MAX_FILE_BYTES = 4 * 2**30  # a bundle file larger than this is refused rather than read into memory
CHUNK_BYTES = 2**20  # files are read in pieces of this size: memory follows the file, not the limit (issue 26)
MAX_DEPTH = 64  # deepest nesting of arrays and objects a record may have; xmfu writes a handful of levels
REL_TOL = 1e-6  # derived figures are recomputed in double precision; JSON keeps 17 significant digits


@dataclass
class Loaded:
    bundle: Bundle | None
    problems: list[str] = field(default_factory=list)


class _Reject(ValueError):
    pass


RECORDS: dict[str, type[msgspec.Struct]] = {"manifest": Manifest, "row": Row, "samples": Samples,
                                            "reading": Reading}
_DECODERS = {kind: msgspec.json.Decoder(record) for kind, record in RECORDS.items()}
_PLAIN = msgspec.json.Decoder()


def _record(kind: str, raw: bytes | str, where: str) -> tuple[Any, list[str]]:
    """The record as plain JSON values (what readers get), and its problems: strict JSON (msgspec refuses NaN and
    Infinity tokens), then its typed declaration (every key declared, none other, types and ranges)."""
    data = raw.encode() if isinstance(raw, str) else raw
    # A parser recurses per level (msgspec and json raise RecursionError past Python's limit); the count of opening
    # brackets bounds the depth, so most lines need no scan.
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH and nesting_depth(data) > MAX_DEPTH:
        raise _Reject(f"{where}: nested deeper than {MAX_DEPTH} levels of arrays and objects (no bundle record is)")
    try:
        value = _PLAIN.decode(raw)
    except msgspec.DecodeError as exc:
        raise _Reject(f"{where}: not valid JSON ({_why_not_json(raw, exc)})"[:300]) from None
    try:
        _DECODERS[kind].decode(raw)
    except msgspec.ValidationError as exc:
        return value, [f"{where}: {_located(str(exc))}"[:300]]
    return value, []


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
        raise _Reject(f"{token} is not JSON (bundles are strict JSON)")

    try:
        json.loads(raw, parse_constant=refuse)
    except _Reject as found:
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


def _read(folder: Path, name: str) -> bytes:
    """A file of the bundle: a regular file, not through a link, not a device, within the size limit."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(folder / name, flags)
    except FileNotFoundError:
        raise _Reject(f"missing file {name}") from None
    except OSError as exc:  # ELOOP: a link, which a bundle never holds
        raise _Reject(f"{name}: cannot be opened as a plain file ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Reject(f"{name}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise _Reject(f"{name}: {info.st_size} bytes, over the {MAX_FILE_BYTES} byte limit")
        return _read_bounded(fd, name)
    finally:
        os.close(fd)


def _read_bounded(fd: int, name: str) -> bytes:
    """The file's bytes, read in CHUNK_BYTES pieces up to the limit (it may have grown since fstat). One read of
    the whole limit would ask for a 4 GiB buffer per file, which `ulimit -v` or strict overcommit refuses
    (CPython 3.11's BufferedReader.read(n) asks for an n-byte buffer before reading: MemoryError under
    `ulimit -v 4000000`, as tests/results/test_bounded_reads.py shows)."""
    chunks, total = [], 0
    while chunk := os.read(fd, min(CHUNK_BYTES, MAX_FILE_BYTES + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_FILE_BYTES:
            raise _Reject(f"{name}: over the {MAX_FILE_BYTES} byte limit")
    return b"".join(chunks)


def _sums(folder: Path, data: dict[str, bytes]) -> list[str]:
    problems, listed = [], {}
    for line in data[SUMS].decode(errors="replace").splitlines():
        digest, _, name = line.partition("  ")
        name = name.strip()
        if not name or Path(name).name != name or name.startswith("."):
            problems.append(f"{SUMS} names {name!r}, which is not a plain file name in the bundle")
            continue
        listed[name] = digest
    problems += [f"{SUMS} does not list {name}" for name in REQUIRED_FILES if name not in listed]
    for name, digest in listed.items():
        if name not in data:
            try:
                data[name] = _read(folder, name)
            except _Reject as exc:
                problems.append(str(exc))
                continue
        if hashlib.sha256(data[name]).hexdigest() != digest:
            problems.append(f"{name}: checksum mismatch (file changed or truncated after the run wrote it)")
    return problems


def _jsonl(name: str, raw: bytes, kind: str) -> tuple[list[dict], list[str]]:
    records, problems = [], []
    if raw and not raw.endswith(b"\n"):
        problems.append(f"{name}: last line is incomplete (truncated)")
    for number, line in enumerate(raw.splitlines(), 1):
        try:
            record, found = _record(kind, line, f"{name} line {number}")
        except _Reject as exc:
            problems.append(str(exc))
            continue
        problems += found
        records.append(record)
    return records, problems


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-300)


def _derived(row: dict[str, Any], where: str) -> list[str]:
    """Figures a row states that follow from its other figures."""
    out, t = [], row.get("time_s")
    if not isinstance(t, dict) or not isinstance(t.get("median"), (int, float)) or t["median"] <= 0:
        return out
    tflops, flops, peak = row.get("tflops"), row.get("flops"), row.get("peak_tflops")
    if isinstance(tflops, (int, float)) and isinstance(flops, (int, float)) and flops > 0 \
            and not _close(tflops, flops / t["median"] / 1e12):
        out.append(f"{where}: tflops {tflops} is not flops / median time ({flops / t['median'] / 1e12})")
    mfu = row.get("mfu")
    if isinstance(mfu, (int, float)) and isinstance(tflops, (int, float)) and isinstance(peak, (int, float)) \
            and not _close(mfu, tflops / peak):
        out.append(f"{where}: mfu {mfu} is not tflops / peak_tflops ({tflops / peak})")
    return out


def _consistency(manifest: dict, rows: list[dict], samples: list[dict]) -> list[str]:
    problems = []
    counts = dict.fromkeys(ROW_STATUSES, 0)
    for number, row in enumerate(rows, 1):
        if row.get("status") in counts:
            counts[row["status"]] += 1
        if row.get("run_id") != manifest.get("run_id"):
            problems.append(f"{CASES} line {number}: run_id {row.get('run_id')!r} is not the manifest's")
        problems += _derived(row, f"{CASES} line {number}")
    if isinstance(manifest.get("counts"), dict) and manifest["counts"] != counts:
        problems.append(f"{MANIFEST}: counts {manifest['counts']} do not match {CASES} {counts}")
    if len(samples) != len(rows):
        problems.append(f"{SAMPLES} has {len(samples)} records for {len(rows)} rows in {CASES}")
    for number, (row, rec) in enumerate(zip(rows, samples, strict=False), 1):
        if (rec.get("case_id"), rec.get("backend")) != (row.get("case_id"), row.get("backend")):
            problems.append(f"{SAMPLES} line {number} is not the samples of {CASES} line {number}")
        values = rec.get("samples")
        if isinstance(values, list) and values:
            try:
                x = np.asarray(values, dtype=np.float64)
            except (TypeError, ValueError):
                problems.append(f"{SAMPLES} line {number}: samples are not all numbers")
                continue
            if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x < 0):
                problems.append(f"{SAMPLES} line {number}: samples must be finite, non-negative seconds")
    return problems


def load_bundle(folder: str | Path) -> Loaded:
    """Read and validate the bundle at `folder`; `bundle` is None where it cannot be read at all."""
    folder = Path(folder)
    if not folder.is_dir():
        return Loaded(None, [f"{folder}: not a folder"])
    data: dict[str, bytes] = {}
    problems: list[str] = []
    for name in (*REQUIRED_FILES, SUMS):
        try:
            data[name] = _read(folder, name)
        except _Reject as exc:
            problems.append(str(exc))
    if problems:
        return Loaded(None, problems)
    if (folder / TELEMETRY).exists() or (folder / TELEMETRY).is_symlink():
        try:
            data[TELEMETRY] = _read(folder, TELEMETRY)
        except _Reject as exc:
            problems.append(str(exc))
    problems += _sums(folder, data)
    try:
        manifest, found = _record("manifest", data[MANIFEST], MANIFEST)
    except _Reject as exc:
        return Loaded(None, [*problems, str(exc)])
    version = manifest.get("schema") if isinstance(manifest, dict) else None
    if version not in ACCEPTED_SCHEMAS:
        return Loaded(None, [*problems, f"{MANIFEST}: schema {version!r} is not a bundle format this xmfu reads "
                                        f"({', '.join(ACCEPTED_SCHEMAS)}); a newer xmfu wrote it, or it is no bundle"])
    problems += found
    rows, row_problems = _jsonl(CASES, data[CASES], "row")
    samples, sample_problems = _jsonl(SAMPLES, data[SAMPLES], "samples")
    problems += row_problems + sample_problems
    if TELEMETRY in data:
        problems += _jsonl(TELEMETRY, data[TELEMETRY], "reading")[1]
    if isinstance(manifest, dict):
        problems += _consistency(manifest, rows, samples)
    bundle = Bundle(folder, manifest, rows, samples) if isinstance(manifest, dict) else None
    return Loaded(bundle, problems)


def validate_bundle(folder: str | Path) -> list[str]:
    """Every problem found in the bundle at `folder`; an empty list means it is valid."""
    return load_bundle(folder).problems
