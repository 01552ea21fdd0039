"""Build a wheelhouse for a node that reaches no package index: xmfu's wheel and every runtime dependency that is not
a framework, one version of each, with a manifest (names, versions, sha256) that `scripts/install.sh --offline DIR`
checks and installs from. `make wheelhouse` runs it (docs/install.md, Offline nodes).

usage: python scripts/wheelhouse.py [--dest DIR] [--python X.Y|PATH] [--platform TAG] [--extras LIST] [--add REQS]
                                    [--numpy VERSION]

Why it is done this way:
- The node's image brings its frameworks (torch with its CUDA or ROCm libraries, triton, jax, jaxlib and their
  plugins, numpy): they are left out unless --add names them (FRAMEWORKS).
- The node builds nothing: `pip download --only-binary=:all:`. xmfu's own wheel is built here (`pip wheel
  --no-deps`), and so are those of BUILT_HERE, which pip then finds with --find-links.
- pip resolves under an interpreter of the node's Python version: it evaluates dependency markers
  (`; python_version < "3.11"`) against the interpreter it runs under, not against --python-version
  (pypa/pip#6117, #11010). --python-version still filters wheels and Requires-Python for that version.
- pip matches a manylinux_2_N platform tag exactly (pip/_internal/utils/compatibility_tags.py expands only the
  legacy manylinux2014 and manylinux2010 names), so a node's glibc 2.N is passed as every manylinux_2_M with M <= N.
Standard library, pip run as a command, and `packaging` (pip's copy where it is not installed) for markers, through
scripts/wheelhouse_check.py; scripts/keep_installed.py gives the pins for the node's Python.
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import keep_installed
from wheelhouse_check import (
    MANIFEST,
    SCHEMA,
    canonical,
    fail,
    missing_requirements,
    requirement_name,
    wheel_metadata,
    wheel_name_version,
)

ROOT = Path(__file__).resolve().parent.parent
TARGET_MB = 30  # issue 31: a wheelhouse without extras should stay under this
# The frameworks, each with the packages that come with it; all are left out unless named in --add, and naming one
# keeps its companions (torch needs its nvidia-* libraries to install). nvidia-ml-py is NVML's Python binding,
# telemetry (the nvidia extra), not a CUDA library.
FRAMEWORKS = {
    "numpy": ("numpy",),
    "torch": ("torch", "triton", "pytorch-triton*", "nvidia-*", "cuda-*"),
    "triton": ("triton",),
    "jax": ("jax", "jaxlib", "jax-cuda*", "jax-rocm*", "libtpu*", "nvidia-*"),
    "jaxlib": ("jaxlib", "jax-cuda*", "jax-rocm*", "libtpu*", "nvidia-*"),
}
NOT_FRAMEWORKS = ("nvidia-ml-py",)
# Dependencies PyPI has as sdists only, whose (pure Python) wheels are built here: omegaconf 2.3 and hydra-core 1.3
# require antlr4-python3-runtime==4.9.*, and its 4.9.3 is an sdist (pypi.org/project/antlr4-python3-runtime/4.9.3).
BUILT_HERE = ("antlr4-python3-runtime==4.9.*",)
# PEP 508 marker variables of an interpreter, as packaging.markers.default_environment() computes them.
MARKERS = """import json, os, platform, sys
v = sys.implementation.version
print(json.dumps({"implementation_name": sys.implementation.name, "os_name": os.name,
  "implementation_version": f"{v.major}.{v.minor}.{v.micro}", "platform_machine": platform.machine(),
  "platform_release": platform.release(), "platform_system": platform.system(), "platform_version": platform.version(),
  "python_full_version": platform.python_version(), "platform_python_implementation": platform.python_implementation(),
  "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform}))"""


class Parser_(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one paragraph, exit 2, as every xmfu command
        fail(f"{message} (see the top of scripts/wheelhouse.py, or docs/install.md, Offline nodes)")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser_(prog="scripts/wheelhouse.py", description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, default=ROOT / "dist" / "wheelhouse", help="the wheelhouse folder")
    parser.add_argument("--python", default="", help="the node's Python: X.Y, or an interpreter's path")
    parser.add_argument("--platform", default="", help="the node's platform tag, e.g. manylinux_2_28_x86_64")
    parser.add_argument("--extras", default="", help="xmfu extras, comma-separated (history, nvidia, amd, dev...)")
    parser.add_argument("--add", default="", help="more requirements, space-separated (a framework: by name)")
    parser.add_argument("--numpy", default="", help="the node's numpy version: the resolution fits it")
    parser.add_argument("--project", type=Path, default=ROOT, help=argparse.SUPPRESS)  # tests: a prebuilt wheel
    parser.add_argument("--constraints", type=Path, default=ROOT / "constraints.txt", help=argparse.SUPPRESS)
    parser.add_argument("--pip-option", action="append", default=[], help=argparse.SUPPRESS)  # tests: --no-index...
    return parser.parse_args(argv)


def interpreter(spec: str) -> tuple[str, dict]:
    """The node's interpreter (this one, a path, or X.Y found on PATH, under pyenv or uv) and its marker variables."""
    version = re.fullmatch(r"\d+\.\d+", spec)
    if version and tuple(map(int, spec.split("."))) < (3, 10):
        fail(f"WHEELHOUSE_PYTHON={spec}: xmfu needs Python 3.10 or later (pyproject.toml, requires-python).")
    for candidate in candidates(spec) if spec else [sys.executable]:
        try:
            proc = subprocess.run([candidate, "-c", MARKERS], capture_output=True, text=True, check=False)
        except OSError:
            continue
        environment = json.loads(proc.stdout) if proc.returncode == 0 else {}
        if environment and (not version or environment["python_version"] == spec):
            return candidate, environment
    fail(f"WHEELHOUSE_PYTHON={spec}: no Python {spec} interpreter found (python{spec} on PATH, pyenv's or uv's). "
         "pip evaluates dependency markers against the interpreter it runs under, not --python-version "
         "(pypa/pip#11010), so the wheelhouse is resolved by one of the node's version: install one (pyenv install, "
         f"uv python install, apt) or give its path, WHEELHOUSE_PYTHON=/path/to/python{spec}."
         if version else f"WHEELHOUSE_PYTHON={spec}: not a Python version (3.12) nor an interpreter that runs.")


def candidates(spec: str) -> list[str]:
    """Where an interpreter of version `spec` (X.Y) may be: PATH, pyenv's versions, uv's; or `spec` as a path."""
    if not re.fullmatch(r"\d+\.\d+", spec):
        return [spec]
    home = Path.home()
    pyenv = Path(os.environ.get("PYENV_ROOT", home / ".pyenv"))
    found = [*sorted(pyenv.glob(f"versions/{spec}.*/bin/python{spec}"), reverse=True),
             *sorted(home.glob(f".local/share/uv/python/cpython-{spec}.*/bin/python{spec}"), reverse=True)]
    return [*filter(None, [shutil.which(f"python{spec}")]), *map(str, found)]


def host_platform() -> str:
    """This machine's tag for its glibc and processor (manylinux_2_36_x86_64), or '' where it has no glibc."""
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    found = re.fullmatch(r"glibc (\d+)\.(\d+)", libc or "")
    return f"manylinux_{found[1]}_{found[2]}_{platform.machine()}" if found else ""


def platform_tags(tag: str) -> list[str]:
    """The tags pip is given for a node: for manylinux_2_N_ARCH every manylinux_2_M_ARCH down to M=5 and the legacy
    names (PEP 600); any other tag as it is (pip expands macOS versions itself)."""
    found = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", tag)
    if not found:
        return [tag]
    glibc, arch = int(found[1]), found[2]
    legacy = [name for name, minor in (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5))
              if glibc >= minor]
    return [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)] + [f"{name}_{arch}" for name in legacy]


def pip_for(python: str) -> list[str]:
    """pip run under `python`: its own, or this one's through `pip --python` (pip >= 22.3) where it has none."""
    own = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False).returncode == 0
    return [python, "-m", "pip"] if own else [sys.executable, "-m", "pip", "--python", python]


def frameworks_kept(add: list[str]) -> set[str]:
    return {canonical(re.split(r"[<>=!~;\[\s]", req, maxsplit=1)[0]) for req in add} & set(FRAMEWORKS)


def left_out(name: str, kept: set[str]) -> bool:
    """Whether a package is a framework (or comes with one) that the wheelhouse leaves to the node's image."""
    def matches(frameworks):
        return any(fnmatch.fnmatch(name, pattern) for f in frameworks for pattern in FRAMEWORKS[f])
    return name not in NOT_FRAMEWORKS and matches(set(FRAMEWORKS) - kept) and not matches(kept)


def is_pure(wheel: Path) -> bool:
    return wheel.name.endswith("-none-any.whl")


def build_local(args: argparse.Namespace, local: Path) -> Path:
    """xmfu's wheel and those of BUILT_HERE, built into `local`; returns xmfu's."""
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(local), *args.pip_option]
    if args.project.suffix == ".whl":
        shutil.copy2(args.project, local)
    else:
        run([*pip, str(args.project)], "building xmfu's wheel")
    for requirement in BUILT_HERE:
        run([*pip, requirement], f"building {requirement}'s wheel from its sdist")
    impure = [wheel.name for wheel in local.glob("*.whl") if not is_pure(wheel)]
    if impure:
        fail(f"{', '.join(impure)} built here for this machine only (not pure Python): the node could not use it.")
    return next(wheel for wheel in local.glob("*.whl") if wheel_name_version(wheel.name)[0] == "xmfu")


def run(command: list[str], what: str) -> None:
    print(f"wheelhouse: {what}: {' '.join(command)}", flush=True)
    if subprocess.run(command, check=False).returncode != 0:
        fail(f"{what} failed (pip's messages are above): {' '.join(command)}")


def extras_of(wheel: Path) -> dict[str, set[str]]:
    """Each extra xmfu's wheel provides, with the names of the packages it adds."""
    meta = wheel_metadata(wheel)
    extras: dict[str, set[str]] = {canonical(e): set() for e in meta.get_all("Provides-Extra") or []}
    for line in meta.get_all("Requires-Dist") or []:
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", line)
        if extra:
            extras.setdefault(canonical(extra[1]), set()).add(requirement_name(line))
    return extras


def check_extras(wheel: Path, extras: list[str], kept: set[str]) -> None:
    provided = extras_of(wheel)
    for extra in extras:
        if extra not in provided:
            fail(f"WHEELHOUSE_EXTRAS: xmfu has no extra {extra!r}; it has {', '.join(sorted(provided))}.")
        brought = sorted(name for name in provided[extra] if left_out(name, kept))
        if brought:
            fail(f"WHEELHOUSE_EXTRAS: the extra {extra!r} brings {', '.join(brought)}, a framework the node's image "
                 f"brings itself. To ship it anyway, name it: WHEELHOUSE_ADD='{' '.join(brought)}' (with the "
                 f"extra); for the telemetry alone, the extra nvidia or amd.")


def download(args: argparse.Namespace, python: str, environment: dict, xmfu: Path, out: Path) -> None:
    """`pip download` of xmfu[extras], setuptools (the build backend, for an editable install on the node) and
    --add, every wheel for the node's Python and platform, resolved under the project's pins for that Python."""
    pins = keep_installed.constraints(
        args.constraints.read_text().splitlines(), {"numpy": args.numpy} if args.numpy else {}, {},
        python=tuple(int(p) for p in environment["python_version"].split(".")))
    pins_file = out.parent / "constraints-used.txt"
    pins_file.write_text("\n".join(pins) + "\n")
    target = ["--python-version", environment["python_version"]]
    if environment["implementation_name"] == "cpython":
        target += ["--implementation", "cp"]
    for tag in platform_tags(args.platform) if args.platform else []:
        target += ["--platform", tag]
    extras = f"[{args.extras}]" if args.extras else ""
    run([*pip_for(python), "download", "-q", "--only-binary=:all:", "--dest", str(out),
         "--find-links", str(xmfu.parent), "-c", str(pins_file), *target, *args.pip_option,
         f"{xmfu}{extras}", "setuptools>=64", *args.add.split()],
        f"downloading for Python {environment['python_version']} on {args.platform or 'this platform'}")


def sorted_out(out: Path, kept: set[str]) -> tuple[list[dict], list[dict]]:
    """The wheels kept (name, version, file, sha256, bytes) and the frameworks removed from `out`; one version of
    each package, and wheels only."""
    files, removed, versions = [], [], {}
    for path in sorted(out.iterdir()):
        if path.suffix != ".whl":
            fail(f"pip left {path.name} in the wheelhouse, which is not a wheel: the node would have to build it.")
        name, version = wheel_name_version(path.name)
        versions.setdefault(name, []).append(version)
        if left_out(name, kept):
            removed.append({"name": name, "version": version})
            path.unlink()
            continue
        data = path.read_bytes()
        files.append({"name": name, "version": version, "file": path.name,
                      "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})
    twice = {name: found for name, found in versions.items() if len(found) > 1}
    if twice:
        fail(f"the wheelhouse would hold more than one version of {twice}: pip resolved one version per package, "
             "so this is a bug of scripts/wheelhouse.py; nothing was written.")
    return files, removed


def self_check(out: Path, extras: str, removed: list[dict], environment: dict) -> None:
    """Every requirement of xmfu[extras] for the node's Python is in the wheelhouse or is a framework left out."""
    wheels = {wheel_name_version(path.name)[0]: path for path in out.glob("*.whl")}
    roots = [("xmfu", frozenset(e for e in extras.split(",") if e))]
    missing = missing_requirements(wheels, roots, {entry["name"] for entry in removed}, environment)
    if missing:
        fail(f"the wheelhouse lacks {missing} for Python {environment['python_version']} after pip's download; "
             "nothing was written.")


def write_manifest(out: Path, settings: dict, files: list[dict], removed: list[dict], environment: dict) -> dict:
    manifest = {
        "schema": SCHEMA, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": environment["python_version"], "implementation": environment["implementation_name"],
        "platform": settings["WHEELHOUSE_PLATFORM"] or "any", "settings": settings,
        "xmfu": next(f["version"] for f in files if f["name"] == "xmfu"),
        "total_bytes": sum(f["bytes"] for f in files), "files": files,
        "left_out": [{**entry, "why": "a framework: the node's image brings it"} for entry in removed]}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    # what it holds, one name==version a line (install.sh --offline looks up the frameworks there), and a list that
    # `sha256sum -c SHA256SUMS` checks on a node without Python at hand
    (out / "wheels.txt").write_text("".join(f"{f['name']}=={f['version']}\n" for f in files))
    (out / "SHA256SUMS").write_text("".join(f"{f['sha256']}  {f['file']}\n" for f in files))
    return manifest


def shown(dest: Path) -> str:
    """The folder as `make wheelhouse WHEELHOUSE=` names it: relative to the checkout where it is inside it."""
    return str(dest.relative_to(ROOT)) if dest.is_relative_to(ROOT) else str(dest)


def replaceable(dest: Path) -> None:
    """`dest` is absent, empty or an earlier wheelhouse: never a folder of something else (checked before the
    download, and again before replacing)."""
    if dest.exists() and any(dest.iterdir()) and not (dest / MANIFEST).is_file():
        fail(f"{dest} exists and is not a wheelhouse (no {MANIFEST}): not replaced. Give another folder "
             "(WHEELHOUSE=...) or empty this one.")


def replace(dest: Path, built: Path) -> None:
    """Put the new wheelhouse at `dest`, replacing an earlier wheelhouse."""
    replaceable(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    built.rename(dest)


def summary(dest: Path, manifest: dict) -> None:
    for entry in manifest["files"]:
        print(f"  {entry['name']:<28} {entry['version']:<14} {entry['bytes'] / 1e6:6.2f} MB")
    total = manifest["total_bytes"] / 1e6
    extras = manifest["settings"]["WHEELHOUSE_EXTRAS"] or manifest["settings"]["WHEELHOUSE_ADD"]
    over = "" if total < TARGET_MB or extras else f" (over the {TARGET_MB} MB target)"
    print(f"wheelhouse: {dest}: {len(manifest['files'])} wheels, {total:.1f} MB{over}, for Python "
          f"{manifest['python']} on {manifest['platform']}")
    if manifest["left_out"]:
        print("  left out, the node's image brings them: "
              + ", ".join(f"{e['name']} {e['version']}" for e in manifest["left_out"]))


def main(argv: list[str]) -> int:
    args = parse(argv)
    python, environment = interpreter(args.python)
    # the node's processor for the markers the self-check evaluates (pip itself still takes this machine's)
    machine = re.search(r"(x86_64|aarch64|ppc64le|s390x|arm64|amd64)$", args.platform)
    environment["platform_machine"] = machine[1] if machine else environment["platform_machine"]
    kept = frameworks_kept(args.add.split())
    dest = args.dest.resolve()
    replaceable(dest)
    work = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "local").mkdir(parents=True)
    try:
        xmfu = build_local(args, work / "local")
        extras = [canonical(e) for e in args.extras.split(",") if e.strip()]
        check_extras(xmfu, extras, kept)
        download(args, python, environment, xmfu, work / "out")
        files, removed = sorted_out(work / "out", kept)
        self_check(work / "out", args.extras, removed, environment)
        settings = {"WHEELHOUSE": shown(dest), "WHEELHOUSE_PYTHON": environment["python_version"],
                    "WHEELHOUSE_PLATFORM": args.platform or host_platform(), "WHEELHOUSE_EXTRAS": ",".join(extras),
                    "WHEELHOUSE_ADD": args.add, "WHEELHOUSE_NUMPY": args.numpy}
        manifest = write_manifest(work / "out", settings, files, removed, environment)
        replace(dest, work / "out")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary(dest, manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
