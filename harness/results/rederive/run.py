"""Re-deriving the run-level figures of a bundle: the manifest's comparability_key (from config.yaml, by the run's
own formula, which the front door hands in as a RunFormula) and the suite tag every row's comparability protocol
carries (from the manifest's suite). `xmfu validate` calls these through validator.py (rederive.py's conventions).
"""

from __future__ import annotations

from typing import Any

from xmfu.harness.results.rederive.times import Restated, same


def suite_key(manifest: dict[str, Any]) -> str | None:
    """The tag a suite part's rows carry as comparability.protocol.suite: the manifest's suite, as
    engine/settings.py's SuiteTag.key() writes it; None for a run that is no suite's part."""
    suite = manifest.get("suite")
    if not isinstance(suite, dict):
        return None
    return f"{suite.get('name')}/{suite.get('version')}/{suite.get('definition_sha')}"


def suite_problems(row: dict[str, Any], suite: str | None, where: str) -> list[str]:
    """comparability.protocol.suite against the manifest's suite: a row keyed into another suite's series (or out of
    its own) is refused. The definition hash itself needs the suite's definition, which a bundle does not hold."""
    fields = row.get("comparability")
    protocol = fields.get("protocol") if isinstance(fields, dict) else None
    if not isinstance(protocol, dict) or protocol.get("suite") == suite:
        return []
    said = f"the manifest's suite is {suite!r}" if suite else "the manifest names no suite"
    return [f"{where}: comparability.protocol.suite {protocol.get('suite')!r} is not the run's: {said}"]


def manifest_problems(manifest: dict[str, Any], restated: Restated, where: str) -> list[str]:
    """The manifest's figures (comparability_key) against what the run's formula gives from config.yaml."""
    if restated.problem:
        return [f"{where}: {restated.problem}"]
    return [f"{where}: {key} {manifest.get(key)!r} is not what config.yaml gives ({want!r}): the hash of its "
            f"workload settings, dtype, timing protocol, suite and mamf sweep"
            for key, want in restated.figures.items() if key in manifest and not same(manifest[key], want)]
