"""A bundle's files read within bounds (issue 26 items 9 and 11, issue 42 item 14): opened as regular files only
(never through a link, never a device: a `telemetry.jsonl` linked to /dev/zero must not hang a reader), refused
past a size limit, and read so that memory follows what is kept, never the limit:
- `read`: a file the validator keeps whole (the manifest, config, rows, samples, attachments), read into one
  buffer the size the file has (a list of chunks joined at the end held every byte twice: a 3 GB file needed 6 GB,
  MemoryError under `ulimit -v 6G`);
- `stream`: a file it only checks (telemetry.jsonl, which a long run makes the largest), hashed and checked a line
  at a time as it is read, so its size costs time, not memory; a line longer than any record is one problem.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 4 * 2**30  # a bundle file larger than this is refused rather than read
CHUNK_BYTES = 2**20  # a streamed file is read in pieces of this size
MAX_LINE_BYTES = 2**20  # a streamed line longer than this is refused (a telemetry reading is a few hundred bytes)


class Rejected(ValueError):
    """A file that cannot be read as a bundle's file: missing, a link or a device, or over a limit."""


@contextmanager
def _opened(folder: Path, name: str) -> Iterator[tuple[int, int]]:
    """(descriptor, size) of a regular file of the bundle, not through a link, not a device, within the limit."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(folder / name, flags)
    except FileNotFoundError:
        raise Rejected(f"missing file {name}") from None
    except OSError as exc:  # ELOOP: a link, which a bundle never holds
        raise Rejected(f"{name}: cannot be opened as a plain file ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Rejected(f"{name}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise Rejected(f"{name}: {info.st_size} bytes, over the {MAX_FILE_BYTES} byte limit")
        yield fd, info.st_size
    finally:
        os.close(fd)


def read(folder: Path, name: str) -> bytearray:
    """The file's bytes, in one buffer of the size fstat gave, filled in place (a file that grew since is read on,
    up to the limit); never a buffer of the whole limit (CPython 3.11's BufferedReader.read(n) asks for n bytes
    first: MemoryError under `ulimit -v 4000000`, tests/results/test_bounded_reads.py)."""
    with _opened(folder, name) as (fd, size), open(fd, "rb", buffering=0, closefd=False) as f:
        buffer, total = bytearray(size + 1), 0  # one byte more: a read that fills it means the file grew
        while got := f.readinto(memoryview(buffer)[total:]):
            total += got
            if total > MAX_FILE_BYTES:
                raise Rejected(f"{name}: over the {MAX_FILE_BYTES} byte limit")
            if total == len(buffer):
                buffer.extend(bytes(min(CHUNK_BYTES, MAX_FILE_BYTES + 1 - total)))
    del buffer[total:]
    return buffer


@dataclass
class Streamed:
    digest: str  # the whole file's SHA-256, hex
    lines: int
    problems: list[str] = field(default_factory=list)


def stream(folder: Path, name: str, check: Callable[[bytes, str], list[str]]) -> Streamed:
    """Every line of the file handed to `check(line, where)` as it is read, the file hashed on the way; memory is a
    chunk and a line at most. Rejected where the file cannot be opened as a bundle's file."""
    digest, carry, number, problems, total = hashlib.sha256(), bytearray(), 0, [], 0
    skipping = False  # inside a line already refused as too long: its rest is hashed, never kept
    with _opened(folder, name) as (fd, _):
        while chunk := os.read(fd, CHUNK_BYTES):
            total += len(chunk)
            if total > MAX_FILE_BYTES:
                raise Rejected(f"{name}: over the {MAX_FILE_BYTES} byte limit")
            digest.update(chunk)
            pieces = chunk.split(b"\n")
            for i, piece in enumerate(pieces):
                last = i == len(pieces) - 1
                if not skipping:
                    carry += piece
                if not last:  # a whole line
                    number += 1
                    if not skipping:
                        problems += check(bytes(carry), f"{name} line {number}")
                    carry.clear()
                    skipping = False
                elif len(carry) > MAX_LINE_BYTES:
                    problems.append(f"{name} line {number + 1}: longer than {MAX_LINE_BYTES} bytes (no record is)")
                    carry.clear()
                    skipping = True
    if carry or skipping:
        problems.append(f"{name}: last line is incomplete (truncated)")
        if carry:
            problems += check(bytes(carry), f"{name} line {number + 1}")
    return Streamed(digest.hexdigest(), number, problems)
