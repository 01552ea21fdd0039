"""Writing a result bundle as the run goes.

Rows are appended and flushed the moment a case finishes; the manifest and SHA256SUMS are rewritten
atomically after every case, so an interrupted run leaves a bundle that validates, with status `partial`.
Every record is checked against its typed declaration (schema/row.py, schema/records.py) before it is written:
a key the format does not declare, or a value of the wrong type, is a `RecordError`, never a line in the bundle.
A `guard` (the engine passes its signal shield) wraps every multi-file update, so a Ctrl-C never lands
between a row and the checksums that cover it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import numbers
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec

from xmfu.harness.results import schema
from xmfu.harness.results.schema.records import Manifest, Reading, Samples
from xmfu.harness.results.schema.row import Row

Guard = Callable[[], AbstractContextManager[Any]]


def finite(value: Any, path: str = "", found: list[str] | None = None) -> Any:
    """`value` with every NaN or infinity replaced by None (bundles are strict JSON), the paths in `found`, and
    every number as Python's own float or int (a numpy scalar would otherwise need a fallback to be written)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            if found is not None:
                found.append(path or "(value)")
            return None
        return float(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, dict):
        return {k: finite(v, f"{path}.{k}" if path else str(k), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class BundleWriteError(OSError):
    """The bundle could not be written (disk full, permissions): the last consistent state is kept."""


class RecordError(ValueError):
    """A record does not fit the bundle format: an undeclared key, or a value of the wrong type."""


def checked(record: dict[str, Any], kind: type[msgspec.Struct], name: str) -> dict[str, Any]:
    """`record` unchanged when it is a valid `kind` (the dict is what gets written: absent optional keys stay
    absent); else RecordError naming the field."""
    try:
        msgspec.convert(record, kind)
    except msgspec.ValidationError as exc:
        raise RecordError(f"{name} does not fit {schema.SCHEMA}: {exc}") from None
    return record


def _atomic_write(path: Path, text: str) -> None:
    """Write beside the target, then rename: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _created(folder: Path, fill: Callable[[Path], None]) -> Path:
    """Create `folder` whole or not at all: `fill` writes its first consistent state into a hidden folder beside it,
    which is then renamed to `folder` (a rename within one file system is atomic: POSIX rename(2)). A disk that
    fills, or any error, while it is written leaves nothing behind (issue 26: a tmpfs of 8-16 KB once left a
    half-written, invalid bundle). An existing `folder` is FileExistsError and is left as it is."""
    if folder.exists() or folder.is_symlink():
        raise FileExistsError(errno.EEXIST, "File exists", str(folder))
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".creating", dir=folder.parent))
    try:
        fill(staging)
        # rename(2) replaces an empty folder at the target but fails on a non-empty one (ENOTEMPTY or EEXIST) or a
        # file (ENOTDIR): a run that took the name meanwhile keeps what it wrote, and this one is refused.
        try:
            os.rename(staging, folder)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise FileExistsError(errno.EEXIST, "File exists", str(folder)) from None
            raise
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


class BundleWriter:
    """Writes one bundle. Call `append` per finished (case, backend) and `finalize` once."""

    def __init__(self, folder: Path, manifest: dict[str, Any], config_yaml: str, environment: dict,
                 guard: Guard = nullcontext) -> None:
        self.guard = guard
        self.attachments: list[str] = []  # extra files (a TunableOp results table, a profiler trace)
        self.manifest = {"schema": schema.SCHEMA, **manifest, "status": "partial",
                         "counts": dict.fromkeys(schema.ROW_STATUSES, 0)}
        # Append-only files keep a running SHA-256 and their length: the checksums cost O(new bytes) per row
        # instead of rehashing whole files, and a failed append can be cut back to the last whole row.
        self._hashes = {name: hashlib.sha256() for name in (schema.CASES, schema.SAMPLES, schema.TELEMETRY)}
        self._sizes = dict.fromkeys(self._hashes, 0)
        self.folder = _created(folder, lambda staging: self._first_state(staging, config_yaml, environment))

    def _first_state(self, staging: Path, config_yaml: str, environment: dict) -> None:
        """Every file of an empty partial bundle, written into `staging` (the folder under its temporary name)."""
        self.folder = staging
        (staging / schema.CONFIG).write_text(config_yaml)
        (staging / schema.ENVIRONMENT).write_text(json.dumps(environment, indent=2, sort_keys=True, default=str) + "\n")
        for name in self._hashes:
            (staging / name).touch()
        self._sync()

    def _append(self, parts: list[tuple[str, bytes]]) -> None:
        """Append to one or more files as one unit: all of it, or (on an error such as a full disk) none."""
        saved = {name: (self._hashes[name].copy(), self._sizes[name]) for name, _ in parts}
        try:
            for name, data in parts:
                with (self.folder / name).open("ab") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                self._hashes[name].update(data)
                self._sizes[name] += len(data)
        except OSError as exc:
            for name, (digest, size) in saved.items():
                with contextlib.suppress(OSError):
                    os.truncate(self.folder / name, size)
                self._hashes[name], self._sizes[name] = digest, size
            raise BundleWriteError(exc.errno, f"could not write {self.folder}: {exc.strerror or exc}") from exc

    def append(self, row: dict[str, Any], samples: dict[str, Any]) -> None:
        self.append_many([(row, samples)])

    def append_many(self, records: Iterable[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        """Rows and their samples records appended as one unit, with one sync: all of them or none. A run appends
        each row as it finishes; an import appends its log's rows at once (a sync per row, an fsync and two renames,
        cost 10-20 ms each: 4,000 rows took 90 s)."""
        lines: dict[str, list[bytes]] = {schema.CASES: [], schema.SAMPLES: []}
        statuses = []
        for row, samples in records:
            found: list[str] = []
            row = finite(row, "", found)
            if found:  # kept as null, and said: a NaN from a backend is a finding, never a number in the bundle
                row["non_finite_fields"] = found[:50]
            checked(row, Row, "the row")
            samples = checked(finite(samples), Samples, "the samples record")
            for name, record in ((schema.CASES, row), (schema.SAMPLES, samples)):
                lines[name].append((json.dumps(record, sort_keys=True, allow_nan=False, default=str) + "\n").encode())
            statuses.append(row["status"])
        with self.guard():  # a Ctrl-C now waits until both files, the counts and the checksums agree
            self._append([(name, b"".join(parts)) for name, parts in lines.items()])
            for status in statuses:
                self.manifest["counts"][status] += 1
            self._sync()

    def append_telemetry(self, case_id: str, readings: list[dict[str, Any]]) -> None:
        """The time series of one case (perf_counter times; rows hold the per-backend summaries)."""
        if not readings:
            return
        records = [checked(finite({"case_id": case_id, **r}), Reading, "a telemetry reading") for r in readings]
        text = "".join(json.dumps(r, sort_keys=True, allow_nan=False) + "\n" for r in records)
        with self.guard():
            self._append([(schema.TELEMETRY, text.encode())])
            self._sync()

    def update(self, **fields: Any) -> None:
        with self.guard():  # the manifest and SHA256SUMS are two files: a signal must not land between them
            self.manifest.update(fields)
            self._sync()

    def attach(self, name: str, data: str | bytes) -> Path:
        """Add a file to the bundle, covered by SHA256SUMS; `name` is a plain file name inside the folder."""
        if not name or Path(name).name != name or name.startswith(".") or name in (*schema.REQUIRED_FILES, schema.SUMS):
            raise ValueError(f"attachment name {name!r} must be a new plain file name inside the bundle")
        path = self.folder / name
        with self.guard():
            if isinstance(data, bytes):
                path.write_bytes(data)
            else:
                path.write_text(data)
            if name not in self.attachments:
                self.attachments.append(name)
            self.manifest["attachments"] = list(self.attachments)
            self._sync()
        return path

    def finalize(self, status: str) -> None:
        with self.guard():
            self.manifest["status"] = status
            self.manifest["finished"] = utc_now()
            self._sync()

    def _sync(self) -> None:
        checked(self.manifest, Manifest, "the manifest")
        try:
            _atomic_write(self.folder / schema.MANIFEST, json.dumps(self.manifest, indent=2, sort_keys=True) + "\n")
            names = [*schema.REQUIRED_FILES, schema.TELEMETRY, *self.attachments]
            sums = "".join(f"{self._digest(n)}  {n}\n" for n in names)
            _atomic_write(self.folder / schema.SUMS, sums)
        except OSError as exc:
            raise BundleWriteError(exc.errno, f"could not write {self.folder}: {exc.strerror or exc}") from exc

    def _digest(self, name: str) -> str:
        if name in self._hashes:
            return self._hashes[name].copy().hexdigest()
        return schema.sha256_file(self.folder / name)


class NullWriter:
    """What ranks other than 0 of a multi-process run write: nothing (rank 0 gathers their samples)."""

    def __init__(self, folder: Path, manifest: dict[str, Any]) -> None:
        self.folder = folder
        self.manifest = {"schema": schema.SCHEMA, **manifest, "status": "partial"}

    def append(self, row: dict[str, Any], samples: dict[str, Any]) -> None:
        pass

    def append_telemetry(self, case_id: str, readings: list[dict[str, Any]]) -> None:
        pass

    def update(self, **fields: Any) -> None:
        self.manifest.update(fields)

    def finalize(self, status: str) -> None:
        self.manifest["status"] = status

    def attach(self, name: str, data: str | bytes) -> Path | None:
        return None
