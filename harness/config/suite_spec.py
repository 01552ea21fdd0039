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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from xmfu.harness.engine.declare import NON_NEGATIVE, ConfigError, OneOf, Range, choice, required, setting
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.references import Bands

SCALES = ("auto", "full", "smoke")  # auto: smoke sizes where no accelerator is visible
KINDS = ("run", "ranks", "devices")
CHECK_METRICS = ("tflops", "mfu", "busbw_gbps", "tokens_per_s", "median_s")
# Settings a suite decides for each part; the rest of the command line is passed to every part.
SUITE_LEVEL = ("experiment", "suite", "price", "price_kwh", "pue", "capex_usd", "amortize_years", "store", "run_id",
               "results_dir")


@dataclass(frozen=True)
class PartSettings:
    """`suite.parts.NAME`: one `xmfu run` of a suite."""

    kind: str = setting("run", "run: once | ranks: across every process | devices: once per local device",
                        OneOf(KINDS))
    what: str = setting("", "what the part measures, one line for the report")
    overrides: tuple[str, ...] = setting((), "the part's `xmfu run` overrides")
    smoke: tuple[str, ...] = setting((), "overrides added (after scale=smoke) at smoke sizes")


@dataclass(frozen=True)
class SuiteSettings:
    """`suite:`, the definition of a suite of runs (configs/experiment/acceptance.yaml, nightly.yaml)."""

    name: str = required("the suite's name: letters, digits and '-'")
    version: int = required("stated by every suite, and bumped when its meaning changes: the history then starts "
                            "new series", Range(1, inclusive=True, integer=True))
    parts: dict[str, PartSettings] = required("part name -> its definition")
    scale: str = setting("auto", "auto: smoke sizes where no accelerator is visible | full | smoke", OneOf(SCALES))
    doctor: bool = setting(True, "record xmfu doctor's findings per node")
    only: Any = setting(None, "a list of part names to run, e.g. [mamf,outliers]; null: every part")
    outlier_threshold: float = setting(0.03, "a device (or node) this far below the median is flagged",
                                       Range(maximum=1))
    reference_within: float = setting(0.95, "a headline figure at or above this fraction of its public reference "
                                      "is within its band (docs/references.md)", Range(maximum=1.5))
    reference_far_below: float = setting(0.85, "below this fraction of its public reference a figure is far below: "
                                         "a finding (FAIL)", Range(maximum=1.5))
    barrier_timeout_s: float = setting(7200.0, "under a launcher, how long rank 0 waits for every rank before "
                                       "reporting", NON_NEGATIVE)
    check: tuple[str, ...] = setting(("tflops", "busbw_gbps"), "with store=PATH: the metrics `history check` "
                                     "judges", OneOf(CHECK_METRICS))
    needs_store: bool = setting(False, "refuse to run without store=PATH")
    strict: bool = setting(False, "with store=PATH: a change for the worse fails the run even on a row its own "
                           "bundle marks contended or noisy (by default those are listed as unreliable)")
    not_judged_fails: bool = setting(True, "exit 3 on a NOT JUDGED verdict (rows contended, or none validly timed); "
                                     "false: exit 0 with the verdict still NOT JUDGED, so that a shared runner's "
                                     "contended night is not a failed job while a regression (FAIL, 1) still is")


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
    reference_within: float
    reference_far_below: float
    barrier_timeout_s: float
    check: tuple[str, ...]  # metrics `history check` judges after a run with a store
    needs_store: bool
    strict: bool  # judge the rows their own evidence discounts (nightly.py)
    not_judged_fails: bool  # exit 3 on NOT JUDGED (suite.exit_status); false: 0
    definition_sha: str  # of every part, `only` aside: running a subset does not change what a row means


def _overrides(field: str, values: tuple[str, ...]) -> tuple[str, ...]:
    for i, v in enumerate(values):
        if "=" not in v:
            raise ConfigError(f"{field}[{i}]", f"{v!r} is not an override", "key=value")
    return values


def _part(name: str, settings: PartSettings) -> Part:
    field = f"suite.parts.{name}"
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(field, "is not a plain name", "letters, digits, '-' and '_'")
    return Part(name=name, kind=settings.kind, what=settings.what,
                overrides=_overrides(f"{field}.overrides", settings.overrides),
                smoke=_overrides(f"{field}.smoke", settings.smoke))


def definition_sha(name: str, version: int, parts: Sequence[Part]) -> str:
    """What a part's rows mean: the suite's name and version and each part's kind and overrides (not its
    description, not which parts this run chose)."""
    canonical = json.dumps({"name": name, "version": version,
                            "parts": [[p.name, p.kind, list(p.overrides), list(p.smoke)] for p in parts]},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def parse_suite(data: Any) -> SuiteSpec:
    if data is None:
        raise ConfigError("suite", "None is not a mapping", "a suite definition (experiment=acceptance)")
    s = parse_section("suite", SuiteSettings, data)
    if not s.name.replace("-", "").isalnum():
        raise ConfigError("suite.name", f"{s.name!r} is not a plain name", "letters, digits and '-'")
    why = Bands(s.reference_within, s.reference_far_below).check()
    if why:
        raise ConfigError("suite.reference_far_below", why, "0 < suite.reference_far_below <= suite.reference_within")
    if not s.parts:
        raise ConfigError("suite.parts", "is empty", "a mapping of part name to its definition")
    parts = tuple(_part(str(k), v) for k, v in s.parts.items())
    only = _only(s.only, [p.name for p in parts])
    return SuiteSpec(name=s.name, version=s.version, scale=s.scale, doctor=s.doctor,
                     parts=tuple(p for p in parts if only is None or p.name in only),
                     outlier_threshold=s.outlier_threshold, reference_within=s.reference_within,
                     reference_far_below=s.reference_far_below, barrier_timeout_s=s.barrier_timeout_s, check=s.check,
                     needs_store=s.needs_store, strict=s.strict, not_judged_fails=s.not_judged_fails,
                     definition_sha=definition_sha(s.name, s.version, parts))


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
