"""A fleet folder judged: gathered, diagnosed, and written down: `admitted.json` and `excluded.json` (host, reason
codes, figures: what a scheduler's node list or a vendor's RMA takes), `verdict.json` (the verdict, its reasons, the
baselines, every finding) and the verdict page `report.html`. The first line printed is the verdict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from xmfu.harness.fleet import page, schedule, spec
from xmfu.harness.fleet.diagnose import FAIL, NOT_JUDGED, PASS, Baseline, Diagnosis, diagnose
from xmfu.harness.fleet.gather import Fleet, gather, hosts
from xmfu.harness.fleet.rules import FIGURES, Rule, load

EXIT = {PASS: 0, FAIL: 1, NOT_JUDGED: 3}


def pairs_of(s: spec.FleetSpec, hosts: list[str]) -> list[tuple[str, str]]:
    """The pairs the schedule asks for, by host, in the job's node order."""
    return [(hosts[a], hosts[b]) for r in schedule.rounds(s.pairs, len(hosts)) for a, b in r]


def gathered(folder: Path) -> tuple[spec.FleetSpec, Fleet]:
    """The spec and everything the folder holds, read (and every bundle validated) once."""
    s = spec.read(folder)
    return s, gather(folder, pairs_of(s, hosts(folder)[0][: s.nodes]))


class BaselineError(ValueError):
    """A --baseline that cannot be used: one paragraph."""


def baselines(path: str | None) -> dict[str, Baseline]:
    """--baseline: an earlier fleet folder (its nodes' and links' robust baselines) or an expectation file
    (`expect: {figure: {median: X, sigma: Y}}`, a vendor's numbers)."""
    if path is None:
        return {}
    where = Path(path)
    if (where / spec.SPEC_FILE).is_file():
        earlier = judged(where)[0]
        return {k: Baseline(b.figure, b.median, b.sigma, b.n, f"the fleet {where.name}")
                for k, b in earlier.baselines.items()}
    try:
        data = yaml.safe_load(where.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise BaselineError(f"--baseline {path}: neither a fleet folder nor a readable YAML file ({exc})") from None
    expect = data.get("expect") if isinstance(data, dict) else None
    if not isinstance(expect, dict) or not set(expect) <= set(FIGURES):
        raise BaselineError(f"--baseline {path}: an expectation file is `expect:` with any of {', '.join(FIGURES)}, "
                            "each `{median: NUMBER, sigma: NUMBER}` (sigma optional)")
    out = {}
    for figure, v in expect.items():
        if not isinstance(v, dict) or not isinstance(v.get("median"), (int, float)) or v["median"] <= 0:
            raise BaselineError(f"--baseline {path}: expect.{figure}.median must be a number > 0")
        out[figure] = Baseline(figure, float(v["median"]), float(v.get("sigma") or 0.0), 0, f"the expectation {path}")
    return out


def judged(folder: Path, rules_path: str | None = None, baseline_path: str | None = None,
           found: tuple[spec.FleetSpec, Fleet] | None = None) -> tuple[Diagnosis, tuple[Rule, ...]]:
    """The diagnosis and the rules it was judged by; `found`: the folder as `gathered` read it (else read here)."""
    s, fleet = found or gathered(folder)
    given = baselines(baseline_path if baseline_path is not None else s.baseline)
    rules = load(rules_path if rules_path is not None else s.rules)
    return diagnose(fleet, rules, given.get), rules


def _finding(f: Any) -> dict[str, Any]:
    return {k: v for k, v in asdict(f).items() if v is not None}


def write(folder: Path, fleet: Fleet, d: Diagnosis, rules: Sequence[Rule] | None = None) -> None:
    def figures(host: str) -> dict[str, Any]:
        n = fleet.nodes[host]
        return {name: asdict(f) for name, f in (("matmul_tflops", n.matmul), ("node_busbw_gbps", n.busbw)) if f}

    admitted = [{"host": h, "figures": figures(h)} for h in d.admitted]
    excluded = [{"host": h, "reasons": sorted({f.code for f in fs}), "findings": [_finding(f) for f in fs],
                 "figures": figures(h)} for h, fs in sorted(d.excluded.items())]
    (folder / "admitted.json").write_text(json.dumps(admitted, indent=2) + "\n")
    (folder / "excluded.json").write_text(json.dumps(excluded, indent=2) + "\n")
    verdict = {"verdict": d.verdict, "reasons": d.reasons, "caveats": d.caveats,
               "baselines": {k: asdict(b) for k, b in d.baselines.items()},
               "findings": [_finding(f) for f in d.findings], "hosts": fleet.hosts, "jobs": fleet.jobs}
    (folder / "verdict.json").write_text(json.dumps(verdict, indent=2) + "\n")
    (folder / "report.html").write_text(page.build(spec.read(folder), fleet, d, rules))


def line(d: Diagnosis) -> str:
    return f"{d.verdict}: {'; '.join(d.reasons)}" if d.reasons else d.verdict


def missing(s: spec.FleetSpec, fleet: Fleet) -> tuple[list[str], list[str]]:
    """(the hosts, the step names) a resumed job must run: node checks that never finished, link tests without a
    result (their nodes both able to run), the all-node steps without theirs (on every host)."""
    names = [f"node-{h}" for h, n in fleet.nodes.items() if not n.ran or n.interrupted]
    hosts = [h for h, n in fleet.nodes.items() if not n.ran or n.interrupted]
    for p in fleet.pairs:
        if p.busbw is None:
            names.append(p.name)
            hosts += [h for h in (p.a, p.b) if h not in hosts]
    lacking = [name for name, f in fleet.all_figures.items() if f is None]
    if lacking:
        names += lacking
        hosts = list(fleet.hosts)
    return [h for h in fleet.hosts if h in hosts], names
