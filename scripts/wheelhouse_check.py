"""Check a wheelhouse (made by scripts/wheelhouse.py) against the environment it is about to be installed into.

usage: python scripts/wheelhouse_check.py DIR [--extras LIST]   exit 0, or 2 with one paragraph saying what is wrong
       python scripts/wheelhouse_check.py DIR --remedy NAME     the paragraph for a requirement pip found missing
       python scripts/wheelhouse_check.py DIR --conflict        the paragraph for versions pip found not to fit

scripts/install.sh --offline runs it with the interpreter being installed into, before pip: the wheelhouse must be
for this Python, its files must be the ones its manifest lists (sha256), and every requirement of xmfu[LIST] must be
installed here already or be in the wheelhouse. A missing one is named with the command that adds it to the
wheelhouse, instead of pip's "No matching distribution" after a resolution. Standard library, and `packaging` for
requirement markers (pip's own copy where it is not installed: pip is there, it is what installs).
"""

from __future__ import annotations

import argparse
import email.message
import email.parser
import hashlib
import json
import re
import shlex
import sys
import zipfile
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import NoReturn

MANIFEST = "wheelhouse.json"
SCHEMA = "xmfu.wheelhouse/1"


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503 normalisation)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(text: str) -> str:
    """The (normalised) name a requirement line starts with: "jax[cuda13]>=0.7; extra == 'x'" -> "jax"."""
    return canonical(re.split(r"[<>=!~;@\[\s(]", text.strip(), maxsplit=1)[0])


def wheel_name_version(filename: str) -> tuple[str, str]:
    """(name, version) of a wheel file: `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl` (PEP 427)."""
    parts = filename[: -len(".whl")].split("-")
    return canonical(parts[0]), parts[1]


def fail(paragraph: str) -> NoReturn:
    print(f"xmfu wheelhouse: {paragraph}", file=sys.stderr)
    raise SystemExit(2)


def read_manifest(folder: Path) -> dict:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        fail(f"{folder} is not a wheelhouse: its {MANIFEST} cannot be read ({exc}). Make one on a machine that "
             f"reaches a package index with `make wheelhouse WHEELHOUSE={folder.name}` (docs/install.md, Offline "
             "nodes) and copy the whole folder here.")
    if manifest.get("schema") != SCHEMA:
        fail(f"{folder / MANIFEST} is not an xmfu wheelhouse manifest (schema {manifest.get('schema')!r}, "
             f"expected {SCHEMA!r}); make the wheelhouse again with `make wheelhouse`.")
    return manifest


def wheel_metadata(wheel: Path) -> email.message.Message:
    """A wheel's METADATA (its dist-info's core metadata, an email-style header block)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        text = archive.read(name).decode("utf-8")
    return email.parser.Parser().parsestr(text, headersonly=True)


def requires(wheel: Path) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA."""
    return wheel_metadata(wheel).get_all("Requires-Dist") or []


def _requirement_class():
    """packaging's Requirement: the standalone package where installed, else pip's copy. Not pip's first: importing
    `pip` on Python < 3.12 switches off setuptools' distutils shim for the rest of the process (setuptools'
    _distutils_hack, spec_for_pip; pypa/pip#8761), and a later `import setuptools` there fails."""
    try:
        from packaging.requirements import Requirement
    except ImportError:
        from pip._vendor.packaging.requirements import Requirement
    return Requirement


def missing_requirements(wheels: Mapping[str, Path], roots: Iterable[tuple[str, frozenset[str]]],
                         present: Iterable[str], environment: Mapping[str, str] | None = None
                         ) -> list[tuple[str, str]]:
    """(requirement, needed by) for each requirement reached from `roots` that is neither `present` (installed, so
    pip keeps it and its own requirements are the environment's business) nor among `wheels`. Markers are evaluated
    for `environment` (PEP 508 marker variables; default: this interpreter's), with each dependant's extras."""
    requirement = _requirement_class()
    present, missing, seen = set(present), [], set()
    queue = [(name, extras, "the install") for name, extras in roots]
    while queue:
        name, extras, parent = queue.pop()
        if (name, extras) in seen or name in present:
            continue
        seen.add((name, extras))
        if name not in wheels:
            missing.append((name, parent))
            continue
        for line in requires(wheels[name]):
            req = requirement(line)
            if req.marker is None or any(req.marker.evaluate({**(environment or {}), "extra": e})
                                         for e in (extras or {""})):
                queue.append((canonical(req.name), frozenset(req.extras), name))
    return sorted(set(missing))


def rebuild_command(manifest: Mapping, add: Iterable[str] = (), extras: Iterable[str] = ()) -> str:
    """The `make wheelhouse` command that made this wheelhouse, with `add` named as further requirements and
    `extras` as further extras."""
    settings = dict(manifest["settings"])
    for key, more, sep in (("WHEELHOUSE_ADD", add, " "), ("WHEELHOUSE_EXTRAS", extras, ",")):
        settings[key] = sep.join(dict.fromkeys([*filter(None, settings.get(key, "").split(sep)), *more]))
    return " ".join(["make wheelhouse", *(f"{key}={shlex.quote(value)}" for key, value in settings.items() if value)])


def remedy(folder: Path, manifest: Mapping, missing: list[tuple[str, str]], add: Iterable[str] | None = None,
           extras: Iterable[str] = ()) -> str:
    """One paragraph: what is missing, who needs it, and the command that adds it to the wheelhouse (`add`: the
    names to add by name, default all; the rest come with `extras`)."""
    left_out = {entry["name"] for entry in manifest.get("left_out", [])}
    framework = "; left out of the wheelhouse as a framework, which the image was expected to have"
    named = [f"{name} (needed by {by}{framework if name in left_out else ''})" for name, by in missing]
    add = [name for name, _ in missing] if add is None else list(add)
    one = len(named) == 1
    return (f"{' and '.join(named)} {'is' if one else 'are'} neither installed here nor in the wheelhouse {folder}. "
            f"On a machine that reaches a package index, in an xmfu checkout, add {'it' if one else 'them'}: "
            f"`{rebuild_command(manifest, add, extras)}`; then copy the new folder here and run the install again. "
            "Nothing was installed by this step.")


def conflict(folder: Path, manifest: Mapping) -> str:
    """One paragraph for pip's ResolutionImpossible: most often a numpy here that is older than the one the
    wheelhouse was resolved for (ml_dtypes 0.6 needs numpy 2)."""
    try:
        numpy = metadata.version("numpy")
    except metadata.PackageNotFoundError:
        numpy = None
    resolved = manifest["settings"].get("WHEELHOUSE_NUMPY") or next(
        (entry["version"] for entry in manifest.get("left_out", []) if entry["name"] == "numpy"), None)
    text = (f"the wheels in {folder} do not fit the packages this environment keeps (pip's messages above name "
            "them); nothing was installed by this step.")
    if numpy and resolved and numpy != resolved:
        settings = {**manifest["settings"], "WHEELHOUSE_NUMPY": numpy}
        text += (f" The wheelhouse was resolved for numpy {resolved} and numpy {numpy} is installed here: make one "
                 f"for it, `{rebuild_command({'settings': settings})}`, and copy it here.")
    return text


def check_python(folder: Path, manifest: Mapping) -> None:
    here = "{}.{}".format(*sys.version_info[:2])
    if manifest["python"] != here:
        settings = {**manifest["settings"], "WHEELHOUSE_PYTHON": here}
        fail(f"{folder} holds wheels for Python {manifest['python']}, and this environment runs Python {here} "
             f"({sys.executable}). Make one for it: `{rebuild_command({'settings': settings})}`.")


def check_files(folder: Path, manifest: Mapping) -> None:
    listed = {entry["file"]: entry["sha256"] for entry in manifest["files"]}
    present = {path.name for path in folder.glob("*.whl")}
    for name in sorted(set(listed) ^ present):
        where = "is missing from the folder" if name in listed else "is not in its manifest"
        fail(f"{folder}: {name} {where}: an incomplete or mixed copy. Copy the wheelhouse again as made.")
    for name, digest in sorted(listed.items()):
        if hashlib.sha256((folder / name).read_bytes()).hexdigest() != digest:
            fail(f"{folder}: {name} does not match the sha256 in {MANIFEST}: a damaged copy. Copy it again.")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="wheelhouse_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--extras", default="", help="xmfu extras to be installed, comma-separated")
    parser.add_argument("--remedy", metavar="NAME", help="print the paragraph for NAME found missing by pip")
    parser.add_argument("--conflict", action="store_true", help="print the paragraph for pip's ResolutionImpossible")
    args = parser.parse_args(argv)
    manifest = read_manifest(args.folder)
    if args.remedy or args.conflict:
        text = conflict(args.folder, manifest) if args.conflict else remedy(
            args.folder, manifest, [(canonical(args.remedy), "the install")])
        print(f"xmfu wheelhouse: {text}")
        return 0
    check_python(args.folder, manifest)
    check_files(args.folder, manifest)
    wheels = {wheel_name_version(path.name)[0]: path for path in args.folder.glob("*.whl")}
    installed = {canonical(d.metadata["Name"]) for d in metadata.distributions() if d.metadata["Name"]}
    extras = frozenset(e for e in args.extras.split(",") if e)
    built = frozenset(e for e in manifest["settings"]["WHEELHOUSE_EXTRAS"].split(",") if e)
    missing = missing_requirements(wheels, [("xmfu", extras)], installed - {"xmfu"})
    if missing:  # what the wheelhouse's own extras lack is added by name; the rest by the extras asked for here
        by_name = [name for name, _ in missing_requirements(wheels, [("xmfu", built)], installed - {"xmfu"})]
        fail(remedy(args.folder, manifest, missing, by_name, sorted(extras - built)))
    print(f"xmfu wheelhouse: {args.folder} ({len(wheels)} wheels for Python {manifest['python']}, "
          f"{manifest['platform']}): every file matches its sha256, every requirement is here or installed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
