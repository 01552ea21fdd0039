"""What every `xmfu` subcommand shares: its argument parser, the one-paragraph usage error (exit 2), and
the checks of its inputs (a bundle folder or an archive of bundles, validated as it is read; an output path) that
turn bad input into that error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

# The archives a command has opened: their bundles are read from temporary folders until the command ends
# (`release_inputs`, which `main` calls), since a report or an export reads a bundle's files as it goes.
_OPENED = contextlib.ExitStack()


class Parser(argparse.ArgumentParser):
    """argparse with xmfu's one-paragraph errors."""

    def error(self, message: str) -> None:  # argparse's default exits 2 too, but with its own usage dump
        raise SystemExit(usage_error(f"{self.prog}: {message}"))


def usage_error(message: str) -> int:
    """Print `message` as xmfu's one-paragraph error; the exit status for bad input."""
    print(f"xmfu: {message}", file=sys.stderr)
    return 2


class UsageFailure(Exception):
    """Bad input found while loading a command's inputs: one paragraph, exit 2."""


def validated_bundle(command: str, folder: str, held: bool = True) -> Any:
    """The bundle at `folder`, read and validated in one pass; a problem is a usage error naming it. `held`: the
    command keeps it to its end (validator.load_bundle); False for a command that streams its bundles."""
    loaded = load(folder, held)
    if loaded.problems or loaded.bundle is None:
        more = f" (and {len(loaded.problems) - 1} more: xmfu validate {folder})" if len(loaded.problems) > 1 else ""
        raise UsageFailure(f"{command}: {folder} is not a valid bundle: {loaded.problems[0]}{more}")
    return loaded.bundle


def load(folder: str | Path, held: bool) -> Any:
    """validator.load_bundle(folder, held=held), imported when first needed (it brings numpy and the
    re-derivation). What a command holds to its end is kept to the process's end where `keep_to_exit` was asked."""
    from xmfu.harness.results.bundle.validator import load_bundle

    loaded = load_bundle(folder, held=held)
    if held and _HELD["kept"] is not None:
        _HELD["kept"].append(loaded)
    return loaded


# The bundles commands held to their end, kept to the process's end: only in the `xmfu` process itself
# (main.run_as_module), which then leaves without freeing them; a caller of `main` (a test, a script) frees them.
_HELD: dict[str, list[Any] | None] = {"kept": None}


def keep_to_exit() -> None:
    _HELD["kept"] = []


def holds_bundles() -> bool:
    """Whether this process's command held bundles to its end (and `keep_to_exit` was asked)."""
    return bool(_HELD["kept"])


def validated_bundles(command: str, path: str, held: bool = True) -> list[Any]:
    """The bundles at `path`: a bundle folder, a suite's folder or an archive made by `xmfu archive` (every bundle
    in it), each read and validated; a problem is a usage error naming it. `held`: as for `validated_bundle`."""
    from xmfu.harness.results.bundle import archive

    if suite_folder(path):
        return [validated_bundle(command, str(f), held) for f in suite_bundle_folders(command, Path(path))]
    if not archive.is_archive(path):
        return [validated_bundle(command, path, held)]
    try:
        loaded = _OPENED.enter_context(archive.opened(path))
    except archive.ArchiveError as exc:
        raise UsageFailure(f"{command}: {path} is not a sound archive: {exc}") from None
    for name, one in loaded:
        if one.problems or one.bundle is None:
            raise UsageFailure(f"{command}: {path} holds a bundle that is not valid, {name}: {one.problems[0]} "
                               f"(xmfu validate {path})")
    return [one.bundle for _, one in loaded]


def is_suite_folder(path: Path) -> bool:
    """A suite's folder (harness/suites/suite.py): `suite.json` at its top once the suite ends, a `node.json` per
    host folder as each node ends. Its bundles lie in its hosts' and parts' folders."""
    return (path / "suite.json").is_file() or any(path.glob("*/node.json"))


def suite_folder(path: str | Path) -> bool:
    """`path` is a suite's folder and not itself a bundle: every command that reads bundles reads each in it."""
    folder = Path(path)
    return folder.is_dir() and not (folder / "manifest.json").exists() and is_suite_folder(folder)


def suite_bundle_folders(command: str, folder: Path) -> list[Path]:
    """The bundle folders in a suite's folder, in order (the same walk as harness/suites/nightly.suite_bundles: cli
    may not import suites, tests/test_layout.py); none is a usage error naming the folder."""
    found = sorted(m.parent for m in folder.rglob("manifest.json"))
    if not found:
        raise UsageFailure(f"{command}: {folder} is a suite's folder with no bundle in it yet (its parts write "
                           "theirs as they run). Allowed: a suite's folder holding bundles, a bundle, an archive")
    return found


def gathered_bundles(command: str, paths: Sequence[str]) -> list[Any]:
    """Every bundle at `paths`, all read and validated before the command uses any (a command that adds to a
    store adds all or nothing). What a path may be: `each_gathered_bundle`."""
    return list(each_gathered_bundle(command, paths))


def each_gathered_bundle(command: str, paths: Sequence[str]) -> Iterator[Any]:
    """The bundles at `paths`, validated, one at a time (a command that streams holds one in memory). A path is a
    bundle folder, an archive, or a suite's folder (every bundle in it). A shell glob (`results/*/`) also catches
    other folders (`results/reference/`, a stray file): with more than one path, one that is none of those is
    skipped with a note on stderr; a lone path that is none of those, and a bundle that is not valid, are a usage
    error, and so is finding no bundle at all."""
    from xmfu.harness.results.bundle import archive

    found = 0
    for path in paths:
        folder = Path(path)
        if archive.is_archive(path) or (folder / "manifest.json").exists():
            bundles: Iterable[Any] = validated_bundles(command, path, held=False)
        elif suite_folder(folder):
            bundles = (validated_bundle(command, str(f), held=False) for f in sorted(m.parent for m in folder.rglob(
                "manifest.json")))
        elif len(paths) > 1:
            print(f"xmfu: {command}: skipped {path}: not a bundle, a suite's folder or an archive", file=sys.stderr)
            continue
        else:
            bundles = validated_bundles(command, path, held=False)  # names what is wrong with it
        for bundle in bundles:
            found += 1
            yield bundle
    if not found:
        raise UsageFailure(f"{command}: no bundle in {', '.join(paths)}. Allowed: bundle folders "
                           "(results/<run_id>), suite folders, archives made by `xmfu archive`")


def release_inputs() -> None:
    """Remove the temporary folders of the archives opened so far."""
    _OPENED.close()


def output_path(command: str, path: str, suffixes: tuple[str, ...] | None = None) -> Path:
    """Where `-o` writes: a file (not a folder) in a folder that exists and this user can write in (not on a
    read-only filesystem: access(2) answers EROFS there, root included) and, where the suffix picks the format,
    with one of `suffixes`."""
    out = Path(path)
    if out.is_dir():
        raise UsageFailure(f"{command}: -o {path} is a folder. Allowed: a file to write (in an existing folder)")
    if suffixes and out.suffix.lower() not in suffixes:
        raise UsageFailure(f"{command}: -o {path}: unknown suffix {out.suffix or '(none)'!r}. "
                           f"Allowed: {', '.join(suffixes)}")
    if not out.parent.is_dir():
        raise UsageFailure(f"{command}: -o {path}: the folder {out.parent} does not exist")
    if not os.access(out.parent, os.W_OK | os.X_OK):
        raise UsageFailure(f"{command}: -o {path}: the folder {out.parent} cannot be written in (read-only, or "
                           "not this user's)")
    return out


def writable_folder(command: str, flag: str, path: str) -> Path:
    """A folder a command creates or writes in (`--store`, `--results-dir`, a bundle to sign): not a file, and it
    (or, where it does not exist yet, the nearest folder above it that does) one this user can write in; access(2)
    answers EROFS on a read-only filesystem, root included."""
    folder = Path(path)
    named = f"{flag} {path}" if flag else path
    nearest = folder.absolute()
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    above = "" if nearest == folder.absolute() else f" (at {nearest}, which would hold it)"
    if not nearest.is_dir():
        raise UsageFailure(f"{command}: {named}{above} is a file. Allowed: a folder (made if missing)")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise UsageFailure(f"{command}: {named}{above} cannot be written in (read-only, or not this user's). "
                           "Allowed: a folder this user can write in")
    return folder


def write_output(command: str, out: Path, write: Callable[[Path], None]) -> None:
    """`write(path)` into a temporary file beside `out`, renamed onto it once whole: a write that fails (a full
    disk, a filesystem gone read-only) leaves `out` as it was and no partial file, and ends the command with
    one paragraph and exit status 1 (the input was fine; the write was not)."""
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp{out.suffix}")  # the suffix still picks the format
    try:
        write(tmp)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        print(f"xmfu: {command}: could not write -o {out} ({exc.strerror or exc}); nothing was written there",
              file=sys.stderr)
        raise SystemExit(1) from None
