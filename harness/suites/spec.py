"""A suite's definition: the `suite:` block of an experiment overlay (configs/experiment/acceptance.yaml,
nightly.yaml), checked like every other setting (one paragraph naming the field, exit status 2).

A suite is a list of parts; each part is one `xmfu run` given as Hydra overrides, plus the overrides that
shrink it to smoke sizes. A part's `kind` says where it runs:
- `run`: once, on the node's first device (each node's, under a launcher);
- `ranks`: across every process (collectives): under torchrun or Slurm in every rank, otherwise over the
  node's devices in child processes started with torchrun;
- `devices`: once per local device, the same run on each (`device_index`), for the per-device outliers.

The definition (name, version, every part's kind and overrides) is hashed; the hash joins the comparability
key of every row the suite writes, so a changed suite starts new series in a history store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xmfu.harness.engine.settings import ConfigError, boolean, check_keys, choice, number, positive_float

SCALES = ("auto", "full", "smoke")  # auto: smoke sizes where no accelerator is visible
KINDS = ("run", "ranks", "devices")
SUITE_KEYS = ("name", "version", "scale", "doctor", "only", "parts", "outlier_threshold", "barrier_timeout_s",
              "check", "needs_store")
PART_KEYS = ("kind", "what", "overrides", "smoke")
CHECK_METRICS = ("tflops", "mfu", "busbw_gbps", "tokens_per_s", "median_s")
# Settings a suite decides for each part; the rest of the command line is passed to every part.
SUITE_LEVEL = ("experiment", "suite", "price", "store", "run_id", "results_dir")


@dataclass(frozen=True)
class Part:
    name: str
    kind: str
    what: str
    overrides: tuple[str, ...]
    smoke: tuple[str, ...]


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    version: int
    scale: str
    doctor: bool
    parts: tuple[Part, ...]  # the ones to run (`only` applied)
    outlier_threshold: float
    barrier_timeout_s: float
    check: tuple[str, ...]  # metrics `history check` judges after a run with a store
    needs_store: bool
    definition_sha: str  # of every part, `only` aside: running a subset does not change what a row means


def _strings(field: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(field, f"{value!r} is not a list", "a list of overrides, e.g. [workload=matmul,dtype=bf16]")
    for i, v in enumerate(value):
        if not isinstance(v, str) or "=" not in v:
            raise ConfigError(f"{field}[{i}]", f"{v!r} is not an override", "key=value")
    return tuple(value)


def parse_part(name: str, data: Any) -> Part:
    field = f"suite.parts.{name}"
    if not isinstance(data, Mapping):
        raise ConfigError(field, f"{data!r} is not a mapping", f"a mapping with {', '.join(PART_KEYS)}")
    check_keys(field, data, PART_KEYS)
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(field, "is not a plain name", "letters, digits, '-' and '_'")
    return Part(name=name, kind=choice(f"{field}.kind", data.get("kind", "run"), KINDS),
                what=str(data.get("what") or ""), overrides=_strings(f"{field}.overrides", data.get("overrides")),
                smoke=_strings(f"{field}.smoke", data.get("smoke")))


def definition_sha(name: str, version: int, parts: Sequence[Part]) -> str:
    """What a part's rows mean: the suite's name and version and each part's kind and overrides (not its
    description, not which parts this run chose)."""
    canonical = json.dumps({"name": name, "version": version,
                            "parts": [[p.name, p.kind, list(p.overrides), list(p.smoke)] for p in parts]},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def parse_suite(data: Any) -> SuiteSpec:
    if not isinstance(data, Mapping):
        raise ConfigError("suite", f"{data!r} is not a mapping", "a suite definition (experiment=acceptance)")
    check_keys("suite", data, SUITE_KEYS)
    name = data.get("name")
    if not isinstance(name, str) or not name.replace("-", "").isalnum():
        raise ConfigError("suite.name", f"{name!r} is not a plain name", "letters, digits and '-'")
    version = number("suite.version", data.get("version", 1), integer=True, minimum=1, inclusive=True)
    raw = data.get("parts")
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError("suite.parts", "is empty or not a mapping", "a mapping of part name to its definition")
    parts = tuple(parse_part(str(k), v) for k, v in raw.items())
    names = [p.name for p in parts]
    only = _only(data.get("only"), names)
    check = tuple(choice(f"suite.check[{i}]", m, CHECK_METRICS) for i, m in enumerate(data.get("check") or ()))
    threshold = positive_float("suite.outlier_threshold", data.get("outlier_threshold", 0.03))
    if threshold >= 1:
        raise ConfigError("suite.outlier_threshold", f"{threshold} is not a fraction", "0 < x < 1, e.g. 0.03")
    return SuiteSpec(name=name, version=version, scale=choice("suite.scale", data.get("scale", "auto"), SCALES),
                     doctor=boolean("suite.doctor", data.get("doctor", True)),
                     parts=tuple(p for p in parts if only is None or p.name in only),
                     outlier_threshold=threshold,
                     barrier_timeout_s=positive_float("suite.barrier_timeout_s", data.get("barrier_timeout_s", 7200)),
                     check=check, needs_store=boolean("suite.needs_store", data.get("needs_store", False)),
                     definition_sha=definition_sha(name, version, parts))


def _only(value: Any, names: list[str]) -> set[str] | None:
    if value is None:
        return None
    chosen = [value] if isinstance(value, str) else value
    if not isinstance(chosen, Sequence) or not chosen:
        raise ConfigError("suite.only", f"{value!r} is not a list of parts", ", ".join(names))
    return {choice(f"suite.only[{i}]", v, names) for i, v in enumerate(chosen)}


def shared_overrides(overrides: Sequence[str]) -> list[str]:
    """The command line's overrides every part gets (after its own, so the command line wins): all but the
    suite-level settings and Hydra's own."""
    out = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        top = key.split(".", 1)[0].split("/", 1)[0]
        if top not in SUITE_LEVEL and top != "hydra":
            out.append(o)
    return out
