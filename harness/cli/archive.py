"""`xmfu archive SOURCES... -o FILE.tar.gz`: bundles, or the folders that hold them (a suite's, the GPU reference
set's, with their report and summary), packed into one file to carry off a node; and the problems of an archive
for `xmfu validate` (harness/results/bundle/archive.py reads and writes them)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from xmfu.harness import __version__
from xmfu.harness.cli.common import Parser, load, suite_folder, usage_error

if TYPE_CHECKING:
    from xmfu.harness.results.bundle.validator import Loaded


def cmd_archive(args: Sequence[str]) -> int:
    from xmfu.harness.results.bundle import archive

    parser = Parser(prog="xmfu archive")
    parser.add_argument("sources", nargs="+", help="bundle folders, or folders holding bundles")
    parser.add_argument("-o", "--output", required=True, help="the archive to write: FILE.tar.gz")
    ns = parser.parse_args(args)
    out = Path(ns.output)
    if not ns.output.lower().endswith(archive.SUFFIXES):
        return usage_error(f"archive: -o {ns.output}: the archive's name must end in .tar.gz or .tgz")
    if not out.parent.is_dir():
        return usage_error(f"archive: -o {ns.output}: the folder {out.parent} does not exist")
    if out.is_dir():
        return usage_error(f"archive: -o {ns.output} is a folder. Allowed: a FILE.tar.gz to write")
    if not os.access(out.parent, os.W_OK | os.X_OK):  # EROFS on a read-only filesystem, root included
        return usage_error(f"archive: -o {ns.output}: the folder {out.parent} cannot be written in (read-only, or "
                           "not this user's)")
    try:
        packed = archive.pack(ns.sources, out, __version__)
    except archive.ArchiveError as exc:
        return usage_error(f"archive: {exc}")
    print(f"archive: {packed.bundles} bundles, {packed.files} files, {packed.bytes / 2**20:.2f} MiB: {out}")
    return 0


def problems_of(path: str, check: Callable[[Path], list[str]] | None = None) -> list[tuple[str, Loaded]]:
    """(where, what loading found) for a bundle folder, or for every bundle of an archive (`ARCHIVE:folder/in/it`);
    an archive that is not sound is one entry naming why. `check(folder)`: more problems of each bundle, found
    while its files are at hand (an archive's are extracted only until this returns)."""
    from xmfu.harness.results.bundle import archive
    from xmfu.harness.results.bundle.validator import Loaded

    def checked(loaded: Loaded) -> Loaded:
        if check is not None and loaded.bundle is not None:
            loaded.problems += check(loaded.bundle.folder)
        return loaded

    if suite_folder(path):  # every bundle in it, each named by its folder
        found = sorted(m.parent for m in Path(path).rglob("manifest.json"))
        return [(str(f), checked(load(f, held=True))) for f in found] or [
            (path, Loaded(None, ["a suite's folder with no bundle in it yet (its parts write theirs as they run)"]))]
    if not archive.is_archive(path):
        return [(path, checked(load(path, held=True)))]
    try:
        with archive.opened(path) as opened:
            return [(f"{path}:{name}", checked(one)) for name, one in opened]
    except archive.ArchiveError as exc:
        return [(path, Loaded(None, [str(exc)]))]
