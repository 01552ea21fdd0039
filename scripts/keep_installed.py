"""Write the pip constraints an install uses: the project's pins, except that what is installed stays as it is.

usage: python scripts/keep_installed.py CONSTRAINTS OUT [NAME==VERSION ...]

Run by the interpreter being installed into (scripts/install.sh runs it with the venv's python, which sees the
image's packages through --system-site-packages). Each pin of CONSTRAINTS whose package is already installed becomes
`NAME==<installed version>`: pip (`-c OUT`) may then add packages but never replace the image's torch, JAX,
NumPy... (a constraint applies to every package in the resolution, installed ones included, so a bare project pin
would "upgrade" them). NAME==VERSION arguments replace the project's pin for a package that is not installed
(TORCH_VERSION=...). Imports only the standard library: it runs before anything else is installed.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path

SPEC_START = re.compile(r"[<>=!~;\[\s]")


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503 normalisation)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions() -> dict[str, str]:
    return {canonical(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


def constraints(lines: Iterable[str], installed: Mapping[str, str], asked: Mapping[str, str]) -> list[str]:
    """The constraint lines: installed packages keep their version, then what was asked for, then the pins."""
    out, seen = [], set()
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if not text:
            out.append(line.rstrip())
            continue
        name = SPEC_START.split(text, maxsplit=1)[0]
        key = canonical(name)
        seen.add(key)
        if key in installed:
            out.append(f"{name}=={installed[key]}  # installed here: kept")
        elif key in asked:
            out.append(f"{name}=={asked[key]}  # asked for")
        else:
            out.append(text)
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
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    source, target = Path(argv[0]), Path(argv[1])
    lines = constraints(source.read_text().splitlines(), installed_versions(), parse_asked(argv[2:]))
    target.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
