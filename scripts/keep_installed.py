"""Write the pip constraints an install uses: the project's pins, except that what is installed stays as it is.

usage: python scripts/keep_installed.py [--installed-only] CONSTRAINTS OUT [NAME==VERSION ...]

Run by the interpreter being installed into (scripts/install.sh runs it with the venv's python, which sees the
image's packages through --system-site-packages). Each pin of CONSTRAINTS whose package is already installed becomes
`NAME==<installed version>`: pip (`-c OUT`) may then add packages but never replace the image's torch, JAX,
NumPy... (a constraint applies to every package in the resolution, installed ones included, so a bare project pin
would "upgrade" them). NAME==VERSION arguments replace the project's pin for a package that is not installed
(TORCH_VERSION=...). Two kinds of pin of a package that is still to be added are dropped, each with a line on stderr:
- one whose comment says `needs numpy>=X` or `needs python>=X` where this environment keeps an older numpy or runs an
  older Python (a numpy-1.x image: jax 0.10 needs numpy>=2, and the image's numpy stays), so that pip picks the
  newest version that fits instead of failing to resolve;
- one of a package the image's own constraint files (PIP_CONSTRAINT, which pip applies beside `-c`: NGC's images
  pin every package they ship there) already pin: theirs decides, so the two files can never disagree.
--installed-only (install.sh --offline) writes the pins of installed packages alone: a wheelhouse holds one version of
everything else, the one it was resolved with. Imports only the standard library: it runs before anything else is
installed.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

SPEC_START = re.compile(r"[<>=!~;@\[\s]")
NEEDS = re.compile(r"\bneeds\s+((?:(?:numpy|python)>=[0-9.]+[,\s]*)+)")


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503 normalisation)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions() -> dict[str, str]:
    """Each installed distribution's version; where sys.path holds a name twice (a venv over an image's venv over a
    base interpreter), the first one, which is the one `import` and pip see."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical(name), dist.version)
    return found


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a version, three of them ("2.0" -> (2, 0, 0), "2.1.0rc1" -> (2, 1, 0))."""
    numbers = [int(part) for part in re.findall(r"\d+", re.split(r"[a-zA-Z+]", version, maxsplit=1)[0])[:3]]
    return tuple(numbers + [0] * (3 - len(numbers)))


def unmet_needs(comment: str, numpy: str | None, python: tuple[int, ...]) -> list[str]:
    """The `needs numpy>=X, python>=Y` of a pin's comment that this environment does not meet, as text."""
    found = NEEDS.search(comment)
    if not found:
        return []
    have = {"python": ".".join(map(str, python)), "numpy": numpy}
    unmet = []
    for need in re.findall(r"(numpy|python)>=([0-9.]+)", found.group(1)):
        name, floor = need
        if have[name] is not None and release(have[name]) < release(floor):
            unmet.append(f"{name}>={floor} ({name} {have[name]} here)")
    return unmet


def their_pins(variable: str | None = None) -> dict[str, str]:
    """The names pinned by the files in PIP_CONSTRAINT (pip splits the variable on whitespace, as for any list
    option: pip/_internal/cli/parser.py, _update_defaults), each with the file that pins it."""
    pinned: dict[str, str] = {}
    for source in (os.environ.get("PIP_CONSTRAINT", "") if variable is None else variable).split():
        path = Path(source.removeprefix("file://"))
        if not path.is_file():  # a URL, or a file that is not there: pip reads it, we cannot
            print(f"keep_installed: PIP_CONSTRAINT names {source}, which is not a file here: not read", file=sys.stderr)
            continue
        for line in path.read_text().splitlines():
            text = line.split("#", 1)[0].strip()
            if text and not text.startswith("-"):
                pinned.setdefault(canonical(SPEC_START.split(text, maxsplit=1)[0]), source)
    return pinned


def pin_line(line: str, installed: Mapping[str, str], asked: Mapping[str, str], theirs: Mapping[str, str],
             python: tuple[int, ...]) -> tuple[str, str | None]:
    """One output line for one line of CONSTRAINTS, and a note for stderr where a pin is dropped."""
    text, _, comment = line.partition("#")
    text = text.strip()
    if not text:
        return line.rstrip(), None
    name = SPEC_START.split(text, maxsplit=1)[0]
    key = canonical(name)
    if key in installed:
        return f"{name}=={installed[key]}  # installed here: kept", None
    if key in asked:
        return f"{name}=={asked[key]}  # asked for", None
    if key in theirs:
        return f"# {text}: left to PIP_CONSTRAINT ({theirs[key]}), which pins {name} too", None
    unmet = unmet_needs(comment, installed.get("numpy"), python)
    if unmet:
        note = f"{text} dropped: it needs {', '.join(unmet)}; pip picks the newest {name} that fits"
        return f"# {note}", note
    return text, None


def constraints(lines: Iterable[str], installed: Mapping[str, str], asked: Mapping[str, str],
                theirs: Mapping[str, str] | None = None, python: tuple[int, ...] | None = None,
                notes: list[str] | None = None) -> list[str]:
    """The constraint lines: installed packages keep their version, then what was asked for, then the pins that
    neither PIP_CONSTRAINT's files pin nor this environment's numpy or Python rule out."""
    theirs = theirs or {}
    python = python or sys.version_info[:2]
    out, seen = [], set()
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if text:
            seen.add(canonical(SPEC_START.split(text, maxsplit=1)[0]))
        result, note = pin_line(line, installed, asked, theirs, python)
        out.append(result)
        if note is not None and notes is not None:
            notes.append(note)
    out += [f"{name}=={version}  # asked for" for name, version in asked.items()
            if name not in seen and name not in installed]
    return out


def parse_asked(args: Iterable[str]) -> dict[str, str]:
    asked = {}
    for arg in args:
        name, sep, version = arg.partition("==")
        if not sep or not name or not version:
            raise SystemExit(f"keep_installed: '{arg}' is not NAME==VERSION")
        asked[canonical(name)] = version
    return asked


def main(argv: list[str]) -> int:
    installed_only = argv[:1] == ["--installed-only"]
    argv = argv[1:] if installed_only else argv
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    notes: list[str] = []
    lines = constraints(source.read_text().splitlines(), installed_versions(), parse_asked(argv[2:]),
                        their_pins(), notes=notes)
    if installed_only:
        lines = [line for line in lines if "# installed here: kept" in line]
        notes = []
    target.write_text("\n".join(lines) + "\n")
    for note in notes:
        print(f"keep_installed: {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
