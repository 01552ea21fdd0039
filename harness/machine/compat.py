"""The framework versions xmfu supports, declared once, and what of the installed stack lies outside them.

Read by the start of every run (named in its output and in the bundle's environment.json), by `xmfu doctor`, and
by the backends' availability checks (machine/frameworks.py): a framework older than its floor cannot work, so the
backends that need it report `skipped` with the reason and the run goes on; one newer than the newest tested runs,
and is named so the reader knows nothing here vouches for it. pyproject.toml states the same range (requires-python,
the numpy bound, the frameworks' extras) and docs/install.md#supported-versions shows it (tests/machine/test_compat.py
keeps both in line with this table).

Versions are read from the installed distributions' metadata (importlib.metadata): nothing is imported to check.
"""

from __future__ import annotations

import platform as host
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Supported:
    """One package's supported range: `floor` is the oldest that works (scripts/compat.sh's `floor` profile
    passes on it), `tested` the newest release series checked (a later one is named, not refused). `below` says
    what happens under the floor."""

    name: str
    floor: str
    tested: str
    below: str
    distributions: tuple[str, ...] = ()  # where to read the version (default: the name); the first found counts


# Why each floor (docs/install.md#supported-versions has the profiles' results):
# - Python 3.10: the oldest CPython that numpy 1.26, torch 2.6 and jax 0.4.38 all ship wheels for.
# - torch 2.6 / triton 3.2 / numpy 1.26: AMD's rocm/pytorch image Dockerfile.rocm starts from
#   (rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.6.0): torch 2.6 with pytorch-triton-rocm 3.2 (torch 2.6's
#   Triton pin) and, built before ROCm's release/2.6 moved to numpy 2.1 in June 2025, numpy 1.26.
# - jax 0.4.38: the last 0.4 release, the oldest with every JAX API xmfu calls (jax.nn.dot_product_attention from
#   0.4.31, jax.lax.DotAlgorithmPreset from 0.4.36; shard_map has a path for both of its homes,
#   workloads/collectives/jax.py shard_map_api).
SUPPORTED: tuple[Supported, ...] = (
    Supported("python", "3.10", "3.12", "pip does not install xmfu (its requires-python)"),
    Supported("numpy", "1.26", "2.5", "xmfu's requirement numpy>=1.26 does not allow it"),
    Supported("torch", "2.6", "2.13", "the torch and Triton backends report skipped"),
    Supported("triton", "3.2", "3.9", "the Triton backends report skipped", ("triton", "pytorch-triton-rocm")),
    Supported("jax", "0.4.38", "0.11", "the JAX backends report skipped"),
    Supported("jaxlib", "0.4.38", "0.11", "the JAX backends report skipped"),
)
BY_NAME = {s.name: s for s in SUPPORTED}
# What each framework's backends need at or above their floor (a Triton backend runs on torch's tensors).
NEEDS = {"torch": ("torch",), "triton": ("torch", "triton"), "jax": ("jax", "jaxlib")}
DOCS = "docs/install.md#supported-versions"
# Where Triton's interpreter (a CPU run) cannot run xmfu's kernels although the version is supported (on a GPU
# they run): (Triton before this, numpy from this or None for any, why). Read from the wheels' runtime/ files:
# - before 3.4, Autotuner.__init__ asks driver.active.get_benchmarker() when a kernel is defined, and a machine
#   without a GPU has no active driver ("0 active drivers ([]). There should only be one."); 3.4 asks on first
#   benchmark (triton 3.3.0's and 3.4.0's autotuner.py);
# - before 3.7, the interpreter's tensor.__index__ is int(self.handle.data) on a one-element array (a loop bound
#   such as range(tl.cdiv(K, BLOCK_K))), which numpy 2.5 refuses ("only 0-dimensional arrays can be converted to
#   Python scalars"); 3.7 squeezes it first (triton 3.6.0's and 3.7.0's interpreter.py).
TRITON_INTERPRETER_LIMITS: tuple[tuple[str, str | None, str], ...] = (
    ("3.4", None, "its autotuner asks for a GPU driver when a kernel is defined"),
    ("3.7", "2.5", "it converts one-element arrays to int, which numpy 2.5 refuses"),
)


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a version string: "2.6.0+rocm6.4.1.git1ded221d" -> (2, 6, 0), "2.11.0rc1" ->
    (2, 11, 0), "0.4.38" -> (0, 4, 38). Local labels and pre-release tags do not move a version across a bound."""
    match = re.match(r"\d+(\.\d+)*", version.strip())
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def compare(version: str, bound: str) -> int:
    """-1, 0 or 1 as `version` is older than, within, or newer than the release series `bound` names
    ("2.13" holds 2.13.0 and 2.13.4; "0.4.38" holds 0.4.38 and 0.4.38.1)."""
    have, want = release(version), release(bound)
    head = have[: len(want)] + (0,) * (len(want) - len(have))
    return (head > want) - (head < want)


def _installed(spec: Supported) -> str | None:
    from importlib import metadata  # here: every `xmfu` start imports this module, few ask it a version (19 ms)

    if spec.name == "python":
        return host.python_version()
    for dist in spec.distributions or (spec.name,):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


@dataclass(frozen=True)
class Finding:
    """A package whose installed version lies outside its supported range."""

    name: str
    version: str
    side: str  # "old" (below the floor: refused) or "new" (after the newest tested: runs, unvouched for)

    def __str__(self) -> str:
        spec = BY_NAME[self.name]
        if self.side == "old":
            return f"{self.name} {self.version} is older than xmfu supports ({spec.floor} or later): {spec.below}"
        return (f"{self.name} {self.version} is newer than xmfu has been tested with ({spec.tested}.x): "
                f"it runs, but no compat profile has checked it")


def versions(read: Callable[[Supported], str | None] = _installed) -> dict[str, str | None]:
    """The installed version of every package of the table (None: not installed)."""
    return {spec.name: read(spec) for spec in SUPPORTED}


def outside(installed: Mapping[str, str | None] | None = None) -> list[Finding]:
    """Every installed package outside its range; `installed` defaults to this environment's."""
    installed = versions() if installed is None else installed
    found = []
    for spec in SUPPORTED:
        version = installed.get(spec.name)
        if version is None:
            continue
        if compare(version, spec.floor) < 0:
            found.append(Finding(spec.name, version, "old"))
        elif compare(version, spec.tested) > 0:
            found.append(Finding(spec.name, version, "new"))
    return found


def too_old(framework: str, installed: Mapping[str, str | None] | None = None) -> str | None:
    """Why `framework`'s backends (torch, triton, jax) cannot run on what is installed, or None."""
    installed = versions() if installed is None else installed
    for name in NEEDS[framework]:
        version = installed.get(name)
        if version is not None and compare(version, BY_NAME[name].floor) < 0:
            return f"{Finding(name, version, 'old')} (supported range: {DOCS})"
    return None


def triton_interpreter_too_old(installed: Mapping[str, str | None] | None = None) -> str | None:
    """Why xmfu's Triton kernels cannot run in this Triton's interpreter (a CPU run), or None."""
    installed = versions() if installed is None else installed
    triton, numpy = installed.get("triton"), installed.get("numpy")
    for below, numpy_from, why in TRITON_INTERPRETER_LIMITS:
        if triton is None or compare(triton, below) >= 0:
            continue
        if numpy_from is None or (numpy is not None and compare(numpy, numpy_from) >= 0):
            with_numpy = f" with numpy {numpy}" if numpy_from else ""
            return (f"triton {triton}'s interpreter cannot run xmfu's kernels{with_numpy} on a machine without a "
                    f"GPU ({why}; fixed in triton {below}): the Triton backends run on a GPU with this version, or "
                    f"on a CPU with triton {below} or later")
    return None


def record(installed: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """The bundle's environment.json entry: the range, and what is outside it."""
    installed = versions() if installed is None else installed
    return {"supported": {s.name: {"floor": s.floor, "tested": s.tested} for s in SUPPORTED},
            "installed": dict(installed), "outside": [str(f) for f in outside(installed)]}


def summary() -> str:
    """The range in one line, as README.md and pyproject.toml state it (jaxlib goes with jax)."""
    labels = {"python": "Python", "numpy": "numpy", "torch": "torch", "triton": "Triton", "jax": "JAX"}
    return ", ".join(f"{labels[s.name]} {s.floor}-{s.tested}" for s in SUPPORTED if s.name in labels)


def markdown_table() -> str:
    """The range as docs/install.md shows it (a test holds the page to it)."""
    rows = ["| package | oldest supported | newest tested | older than supported |", "|---|---|---|---|"]
    rows += [f"| {s.name} | {s.floor} | {s.tested}.x | {s.below} |" for s in SUPPORTED]
    return "\n".join(rows)
