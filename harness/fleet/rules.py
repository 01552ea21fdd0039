"""The rules a fleet is judged by, one per figure, each with its threshold and the reason written in, as
SuperBench's rule files (superbench/analyzer, `rules:` with criteria per metric) and ROCm cvs's threshold files
(a bus-bandwidth floor per test) write them. A rules file replaces the built-in ones figure by figure:

    rules:
      - figure: link_busbw_gbps
        code: slow-link
        below_median: 0.2      # flagged below (1 - 0.2) x the baseline's median ...
        sigmas: 4              # ... and below the median by 4 robust standard deviations (MAD x 1.4826)
        floor: 40              # and always below 40 GB/s busbw, whatever the fleet does (optional)
        reason: a link 20% below the fleet's median is a bad cable, port or switch path

A node's figure is flagged only when its whole 95% CI (from its own samples) lies below the threshold, so a figure
that is low by its own noise alone flags nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# figure -> (unit, what it is)
FIGURES = {"matmul_tflops": ("TFLOP/s", "the node's best matmul"),
           "node_busbw_gbps": ("GB/s busbw", "the collective over the node's own devices"),
           "link_busbw_gbps": ("GB/s busbw", "an all_reduce between two nodes, one process each")}
NODE_FIGURES = ("matmul_tflops", "node_busbw_gbps")  # a node's own, measured by its check (the rest: its links)


@dataclass(frozen=True)
class Rule:
    figure: str
    code: str
    below_median: float
    sigmas: float
    reason: str
    floor: float | None = None


DEFAULT_RULES = (
    Rule("matmul_tflops", "slow-matmul", 0.10, 4.0,
         "a node's best matmul more than 10% below the fleet's median: a slow or throttled GPU, its clocks, power "
         "or cooling (acceptance suites hold nodes to a few percent of each other; 10% leaves room for a CPU's "
         "noise)"),
    Rule("node_busbw_gbps", "slow-node-fabric", 0.15, 4.0,
         "the collective over the node's own devices more than 15% below the fleet's median: its NVLink/xGMI or "
         "PCIe topology, or a device missing from it"),
    Rule("link_busbw_gbps", "slow-link", 0.20, 4.0,
         "an all_reduce between two nodes more than 20% below the fleet's median pair: a cable, port, NIC or "
         "switch path (cvs admits hosts against a bus-bandwidth floor of the same kind)"),
)


class RulesError(ValueError):
    """A rules file that cannot be used: one paragraph naming the field and what is allowed."""


def _number(entry: dict[str, Any], key: str, where: str, default: float | None) -> float | None:
    value = entry.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise RulesError(f"{where}: {key} {value!r} is not a number >= 0")
    return float(value)


def _rule(entry: Any, where: str) -> Rule:
    if not isinstance(entry, dict):
        raise RulesError(f"{where}: a rule is a mapping of figure, code, below_median, sigmas, floor, reason")
    unknown = set(entry) - {"figure", "code", "below_median", "sigmas", "floor", "reason"}
    if unknown:
        raise RulesError(f"{where}: unknown keys {', '.join(sorted(unknown))}; allowed: figure, code, below_median, "
                         "sigmas, floor, reason")
    figure = entry.get("figure")
    if figure not in FIGURES:
        raise RulesError(f"{where}: figure {figure!r}; allowed: {', '.join(FIGURES)}")
    default = next(r for r in DEFAULT_RULES if r.figure == figure)
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise RulesError(f"{where}: every rule says why in `reason` (it is printed beside each finding)")
    code = entry.get("code", default.code)
    if not isinstance(code, str) or not code.replace("-", "").isalnum():
        raise RulesError(f"{where}: code {code!r}: a short word like slow-link")
    return Rule(figure, code, _number(entry, "below_median", where, default.below_median),
                _number(entry, "sigmas", where, default.sigmas), reason.strip(), _number(entry, "floor", where, None))


def load(path: str | Path | None) -> tuple[Rule, ...]:
    """The built-in rules, each replaced by the file's rule for the same figure."""
    if path is None:
        return DEFAULT_RULES
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RulesError(f"--rules {path}: cannot be read as YAML ({' '.join(str(exc).split())[:200]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise RulesError(f"--rules {path}: a YAML mapping with a `rules:` list (docs/fleet.md shows one)")
    given = {}
    for i, entry in enumerate(data["rules"], 1):
        rule = _rule(entry, f"--rules {path}: rule {i}")
        given[rule.figure] = rule
    return tuple(given.get(r.figure, r) for r in DEFAULT_RULES)
