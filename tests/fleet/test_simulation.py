"""A simulated fleet (benchmarks/fleet_simulation.py: real bundles of a 4-node local Slurm fleet, tests/fleet/data,
made into N nodes' with planted faults) is diagnosed as planted: every slow node, slow link, missing device and
node that could not run found, nothing else flagged, in six seeds; its bundles validate; gather.py reads a fleet the
same in worker processes as in its own (issue 43 part 3)."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import sys
from pathlib import Path

import pytest

from xmfu.harness.fleet import gather, outcome, rules, spec
from xmfu.harness.fleet.diagnose import FAIL, diagnose
from xmfu.harness.results.bundle.validator import load_bundle

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("formulas")


def _simulation():
    loaded = sys.modules.get("fleet_simulation")
    if loaded is None:
        where = importlib.util.spec_from_file_location("fleet_simulation", ROOT / "benchmarks" / "fleet_simulation.py")
        loaded = importlib.util.module_from_spec(where)
        sys.modules["fleet_simulation"] = loaded
        where.loader.exec_module(loaded)
    return loaded


def _judged(folder: Path) -> tuple[gather.Fleet, set[tuple[str, str]], str]:
    """The fleet gathered once (as `xmfu fleet report` reads it) and diagnosed by the built-in rules."""
    s = spec.read(folder)
    fleet = gather.gather(folder, outcome.pairs_of(s, gather.hosts(folder)[0][: s.nodes]))
    d = diagnose(fleet, rules.load(None))
    return fleet, {(f.subject, f.code) for f in d.findings}, d.verdict


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """A simulated fleet of 12 nodes (seed 0): 23 node bundles and 10 links' (the node that could not run has none)."""
    folder = tmp_path_factory.mktemp("simulated") / "fleet"
    return folder, _simulation().generate(folder, n=12, seed=0)


def _diagnosed_as_planted(folder: Path, plan) -> gather.Fleet:
    found_fleet, found, verdict = _judged(folder)
    assert found == plan.expected()
    assert verdict == FAIL
    planted = json.loads((folder.parent / "planted.json").read_text())  # beside the folder, not in it
    assert {tuple(e) for e in planted["expected"]} == plan.expected()
    assert not (folder / "planted.json").exists()
    return found_fleet


def test_every_planted_fault_is_found_and_nothing_else_read_alike_in_workers(fleet, monkeypatch) -> None:
    folder, plan = fleet
    in_workers = _diagnosed_as_planted(folder, plan)  # 33 bundles: read in worker processes (PARALLEL_FROM)
    assert gather._workers(33) > 1 or not hasattr(os, "fork")
    monkeypatch.setattr(gather, "_workers", lambda n: 1)
    assert gather.gather(folder, [(p.a, p.b) for p in in_workers.pairs]) == in_workers
    host, link = plan.hosts[1], in_workers.pairs[1]  # one node and one link read alone, as before
    assert gather.node(folder, host, in_workers.nodes[host].step) == in_workers.nodes[host]
    assert gather.pair(folder, link.a, link.b, link.step) == link


@pytest.mark.parametrize("seed", range(1, 6))
def test_every_planted_fault_is_found_in_other_seeds(tmp_path: Path, seed: int) -> None:
    folder = tmp_path / "fleet"
    _diagnosed_as_planted(folder, _simulation().generate(folder, n=12, seed=seed))


def test_generated_bundles_validate_and_name_their_node(fleet) -> None:
    folder, plan = fleet
    bundles = sorted(m.parent for m in folder.rglob("manifest.json"))
    assert len(bundles) == 2 * 11 + 10  # every node but the one that could not run; its two links never ran
    for where in random.Random(0).sample(bundles, 5):
        loaded = load_bundle(where)
        assert loaded.problems == [] and loaded.unchecked == []
        assert loaded.bundle.manifest["run_id"] == where.name
        assert all(r["run_id"] == where.name for r in loaded.bundle.raw_rows)
        assert [h for h in plan.hosts if h in where.name]
    node = json.loads((folder / "nodes" / plan.hosts[0] / plan.hosts[0] / "node.json").read_text())
    assert node["host"] == plan.hosts[0]
    assert all(plan.hosts[0] in b for part in node["parts"] for b in part["bundles"])


def test_a_bundle_that_does_not_validate_is_named_not_read(fleet, tmp_path: Path) -> None:
    source, plan = fleet
    folder = Path(shutil.copytree(source, tmp_path / "fleet"))
    host = next(h for h in plan.hosts if h not in (plan.not_run, plan.missing_device, *plan.slow_nodes))
    cases = next((folder / "nodes" / host).rglob("*-matmul")) / "cases.jsonl"
    cases.write_text(cases.read_text().replace('"tflops": 0.', '"tflops": 9.'))  # a forged figure
    found_fleet, found, _ = _judged(folder)
    assert found_fleet.nodes[host].matmul is None and "checksum mismatch" in found_fleet.nodes[host].invalid[0]
    assert (host, "invalid-result") in found
