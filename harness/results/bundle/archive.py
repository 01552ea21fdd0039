"""One file out: bundles (and the folders that hold them: a suite's, the GPU reference set's) packed into one
`.tar.gz` that can leave a node without network, and read back by every command that reads bundles.

An archive holds the packed folders as they were (regular files only) and, at its top, `xmfu-archive.json`
(schema/records.py `ArchiveManifest`): the bundles it holds and the SHA-256 of every file. Nothing in it is
trusted before it is checked: every member must be a regular file or a folder with a plain relative name (no
link, device, absolute path or `..`), within size limits, listed in the manifest with a matching digest, and
every bundle then goes through the validator like a folder on disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from xmfu.harness.results.bundle.validator import MAX_FILE_BYTES, Loaded, load_bundle
from xmfu.harness.results.bundle.writer import utc_now
from xmfu.harness.results.schema import MANIFEST, SUMS, sha256_file
from xmfu.harness.results.schema.records import ArchiveManifest

ARCHIVE_SCHEMA = "xmfu.archive/1"
MANIFEST_NAME = "xmfu-archive.json"
SUFFIXES = (".tar.gz", ".tgz")
MAX_MEMBERS = 200_000  # a bundle is a handful of files; a suite of hundreds of bundles is far below this
EXTRACTED = "xmfu-archive-"  # the prefix of the temporary folder `opened` extracts into (removed afterwards)
MAX_TOTAL_BYTES = 4 * MAX_FILE_BYTES  # what reading an archive may write to the temporary folder
# What an archive may expand to, as a multiple of its own size: bundles' JSON packs 5 to 20-fold (an import of
# 4,000 nccl-tests rows: 18-fold), gzip's deflate can reach about 1,000-fold (a run of zeros), so a member past this
# is a compression bomb (a 3 GiB one took `compare` to 3.2 GB of memory). Archives up to RATIO_FLOOR_BYTES unpacked
# are never refused by the ratio.
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 64 * 2**20
COPY_BYTES = 2**20  # a member is copied out in pieces of this size, never held whole


class ArchiveError(ValueError):
    """The archive cannot be written or read as asked; the message names what and why."""


def is_archive(path: str | Path) -> bool:
    return str(path).lower().endswith(SUFFIXES) and Path(path).is_file()


def bundles_in(folder: Path) -> list[Path]:
    """The bundle folders at or below `folder` (a folder with a manifest and a checksum file), in order."""
    return sorted(p.parent for p in folder.rglob(MANIFEST) if (p.parent / SUMS).is_file())


def _files(source: Path) -> Iterator[Path]:
    """Every regular file under `source`; a link is refused (an archive never holds one)."""
    for path in sorted(source.rglob("*")):
        if path.is_symlink():
            raise ArchiveError(f"{path} is a link: an archive holds regular files only")
        if path.is_file():
            yield path


@dataclass
class Packed:
    output: Path
    bundles: int
    files: int
    bytes: int


def pack(sources: Sequence[str | Path], output: str | Path, xmfu_version: str) -> Packed:
    """Pack each source (a bundle folder, or a folder holding bundles with its other files) under its own name
    into `output`; every bundle is validated first, and nothing is written unless all of them are valid."""
    roots = [Path(s) for s in sources]
    _check_sources(roots)
    found = [(root, b) for root in roots for b in bundles_in(root)]
    for _, bundle in found:
        loaded = load_bundle(bundle)
        if loaded.problems:
            raise ArchiveError(f"{bundle} is not a valid bundle: {loaded.problems[0]} (xmfu validate {bundle})")
    members = [(f"{root.name}/{f.relative_to(root).as_posix()}", f) for root in roots for f in _files(root)]
    digests = {name: sha256_file(path) for name, path in members}  # a piece at a time, never a whole file
    manifest = ArchiveManifest(
        schema=ARCHIVE_SCHEMA, created=utc_now(), xmfu_version=xmfu_version,
        bundles=[(PurePosixPath(root.name) / b.relative_to(root).as_posix()).as_posix() for root, b in found],
        files=digests)
    out = Path(output)
    tmp = out.with_name(out.name + ".tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            _add_bytes(tar, MANIFEST_NAME, json.dumps(msgspec.to_builtins(manifest), indent=1).encode() + b"\n")
            for name, path in members:
                tar.add(path, arcname=name, recursive=False, filter=_plain)
        os.replace(tmp, out)  # a reader sees the whole archive or none
    except OSError as exc:
        with contextlib.suppress(OSError):  # on a read-only filesystem even removing a missing file fails (EROFS)
            tmp.unlink(missing_ok=True)
        raise ArchiveError(f"could not write {out}: {exc.strerror or exc}") from None
    return Packed(out, len(found), len(members), out.stat().st_size)


def _check_sources(roots: list[Path]) -> None:
    for root in roots:
        if not root.is_dir() or root.is_symlink():
            raise ArchiveError(f"{root} is not a folder: give bundle folders, or folders holding bundles")
        if not bundles_in(root):
            raise ArchiveError(f"{root} holds no bundle (a folder with {MANIFEST} and {SUMS})")
    names = [r.name for r in roots]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ArchiveError(f"two sources share the name {clash[0]!r}: each is packed under its own folder name")


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Owner, group and mode normalised: an archive says nothing about the machine it was made on."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o644
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def _safe_name(name: str) -> PurePosixPath:
    """`name` as a path inside the archive: relative, without `..`, without a Windows separator."""
    path = PurePosixPath(name)
    if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise ArchiveError(f"member {name!r} is not a plain relative path")
    return path


def _extract(archive: Path, into: Path) -> dict[str, bytes]:
    """Every member written under `into`, refusing anything but regular files and folders with plain names, and
    an archive that expands past its bounds (checked on each member's declared size, before it is unpacked);
    returns the digest of every file written (computed as it is copied out, a piece at a time)."""
    digests: dict[str, bytes] = {}
    total = 0
    allowed = min(MAX_TOTAL_BYTES, max(RATIO_FLOOR_BYTES, MAX_RATIO * archive.stat().st_size))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for count, info in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise ArchiveError(f"more than {MAX_MEMBERS} members")
                rel = _safe_name(info.name)
                if info.isdir():
                    continue
                if not info.isfile():
                    raise ArchiveError(f"member {info.name!r} is not a regular file (a link or a device)")
                total += info.size
                if info.size > MAX_FILE_BYTES or total > allowed:
                    raise ArchiveError(f"member {info.name!r} takes the archive over its size limit: {total} bytes "
                                       f"unpacked from {archive.stat().st_size} packed, over the {allowed} allowed "
                                       f"({MAX_RATIO} times its size, at least {RATIO_FLOOR_BYTES}, at most "
                                       f"{MAX_TOTAL_BYTES}; a compression bomb?)")
                target = into.joinpath(*rel.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                digests[rel.as_posix()] = _copied(tar.extractfile(info), target)
    except (tarfile.TarError, EOFError, OSError) as exc:  # not gzip, truncated, unreadable
        raise ArchiveError(f"not a readable .tar.gz ({exc})") from None
    return digests


def _copied(source: Any, target: Path) -> bytes:
    """Copy a member's data to `target` a piece at a time; its SHA-256."""
    digest = hashlib.sha256()
    with target.open("wb") as out:
        while chunk := source.read(COPY_BYTES):
            digest.update(chunk)
            out.write(chunk)
    return digest.digest()


def _manifest(into: Path, digests: dict[str, bytes]) -> ArchiveManifest:
    if MANIFEST_NAME not in digests:
        raise ArchiveError(f"no {MANIFEST_NAME}: not an xmfu archive (xmfu archive FOLDER -o FILE.tar.gz makes one)")
    try:
        manifest = msgspec.json.decode((into / MANIFEST_NAME).read_bytes(), type=ArchiveManifest)
    except msgspec.MsgspecError as exc:
        raise ArchiveError(f"{MANIFEST_NAME}: {exc}") from None
    listed = set(manifest.files)
    present = set(digests) - {MANIFEST_NAME}
    if listed != present:
        extra, missing = sorted(present - listed), sorted(listed - present)
        raise ArchiveError(f"{MANIFEST_NAME} does not list the archive's files (not listed: {extra[:3]}; "
                           f"missing: {missing[:3]})")
    for name, digest in manifest.files.items():
        if digests[name].hex() != digest:
            raise ArchiveError(f"{name}: checksum mismatch (changed after the archive was made)")
    names = [_safe_name(bundle).as_posix() for bundle in manifest.bundles]  # `./b` and `b/` name `b`
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # each would be read again: an export would hold its rows as many times, a compare count it so
        raise ArchiveError(f"{MANIFEST_NAME} lists the bundle {twice[0]!r} more than once (xmfu archive lists each "
                           "bundle once)")
    manifest.bundles = names
    return manifest


@contextmanager
def opened(archive: str | Path) -> Iterator[list[tuple[str, Loaded]]]:
    """The archive's bundles (their folder in the archive, and the bundle read and validated from a temporary
    folder that is removed afterwards). ArchiveError when the archive itself is not sound; the bundles' own
    problems are in their Loaded."""
    into = Path(tempfile.mkdtemp(prefix=EXTRACTED))
    try:
        manifest = _manifest(into, _extract(Path(archive), into))
        yield [(bundle, load_bundle(into / bundle)) for bundle in manifest.bundles]
    finally:
        shutil.rmtree(into, ignore_errors=True)
