"""A node whose own figure the first checks flagged is checked again by the job (job.again_lines, into
nodes/<host>-again/): gather reads both checks' bundles and keeps the better figure, the diagnosis says which nodes
were checked twice, and `xmfu fleet flagged` names the nodes to check again. On the local Slurm cluster two of four
untouched nodes read 2.7x below the others while other jobs ran on the host; a node is excluded as slow only when it
is slow twice."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from xmfu.harness.cli.fleet import cmd_flagged
from xmfu.harness.fleet import gather
from xmfu.harness.fleet.diagnose import FAIL, diagnose
from xmfu.harness.fleet.gather import Figure, Fleet, NodeResult, PairResult
from xmfu.harness.fleet.rules import DEFAULT_RULES

DATA = Path(__file__).resolve().parent / "data" / "try2"


pytestmark = pytest.mark.usefixtures("formulas")


def test_a_node_checked_again_has_both_checks_read_and_the_better_figure_kept(tmp_path):
    folder = tmp_path / "fleet"
    shutil.copytree(DATA, folder)
    first, _ = gather.node_record(folder, "n1", None)
    assert not first.measured_again
    shutil.copytree(folder / "nodes" / "n1", folder / "nodes" / "n1-again")  # the same check, measured again
    out, items = gather.node_record(folder, "n1", None)
    assert out.ran and out.measured_again
    wheres = [where for _, where in items]
    assert wheres == ["nodes/n1/n1/n1-n1-matmul", "nodes/n1/n1-collectives",
                      "nodes/n1-again/n1/n1-n1-matmul", "nodes/n1-again/n1-collectives"]
    node = gather.node(folder, "n1", None)
    assert node.matmul is not None and node.busbw is not None and node.invalid == []
    assert node.first_matmul is not None and node.first_busbw is not None  # the first check's, for the baseline


def test_the_first_checks_figures_are_kept_apart_from_the_better_one(tmp_path, monkeypatch):
    folder = tmp_path / "fleet"
    shutil.copytree(DATA, folder)
    shutil.copytree(folder / "nodes" / "n1", folder / "nodes" / "n1-again")

    def read(path: Path, where: str) -> gather.Read:  # the check again read twice as fast
        k = 2.0 if where.startswith("nodes/n1-again/") else 1.0
        fig = Figure(0.1 * k, 0.09 * k, 0.11 * k, "x", where)
        return (gather.Read(workload="matmul", tflops=fig) if "matmul" in where
                else gather.Read(workload="collectives", busbw=fig))

    monkeypatch.setattr(gather, "read", read)
    twice = gather.node(folder, "n1", None)
    assert twice.first_matmul is not None and twice.first_matmul.value == pytest.approx(0.1)
    assert twice.matmul is not None and twice.matmul.value == pytest.approx(0.2)
    assert twice.first_busbw is not None and twice.first_busbw.value == pytest.approx(0.1)
    assert twice.busbw is not None and twice.busbw.value == pytest.approx(0.2)


def _fleet(values: dict[str, float], again: tuple[str, ...] = ()) -> Fleet:
    nodes = {h: NodeResult(h, ran=True, matmul=Figure(v, v * 0.99, v * 1.01, "TFLOP/s", "t"),
                           busbw=Figure(1.0, 0.99, 1.01, "GB/s busbw", "t"), devices=1, measured_again=h in again)
             for h, v in values.items()}
    return Fleet(Path("/f"), list(values), nodes, [], {}, {}, ["1"])


def test_the_diagnosis_says_which_nodes_were_checked_twice():
    d = diagnose(_fleet({"n1": 0.19, "n2": 0.18, "n3": 0.19, "n4": 0.185}, again=("n3",)), DEFAULT_RULES)
    assert d.verdict != FAIL and d.excluded == {}
    assert "checked twice, the better measurement judged (the first was flagged): n3" in d.caveats
    slow = diagnose(_fleet({"n1": 0.19, "n2": 0.18, "n3": 0.06, "n4": 0.185}, again=("n3",)), DEFAULT_RULES)
    assert slow.verdict == FAIL and list(slow.excluded) == ["n3"]  # slow twice: excluded


def test_a_check_again_does_not_raise_the_bar_for_the_others():
    """Four untouched nodes on a shared host, checked at once: 0.10 TFLOP/s each, two flagged by noise and checked
    again two at a time, reading 0.20. Judged by their better figure they pass; the others, at the same 0.10 as the
    whole first pass, must pass too (before, the re-checks' 0.20 became the baseline and excluded n3)."""
    fleet = _fleet({"n1": 0.20, "n2": 0.20, "n3": 0.10, "n4": 0.10}, again=("n1", "n2"))
    for h in ("n1", "n2"):
        fleet.nodes[h].first_matmul = Figure(0.09, 0.089, 0.091, "TFLOP/s", "t")
    d = diagnose(fleet, DEFAULT_RULES)
    assert d.excluded == {}, d.findings
    fleet.nodes["n3"].matmul = Figure(0.03, 0.0297, 0.0303, "TFLOP/s", "t")  # a node slow at its first check
    assert list(diagnose(fleet, DEFAULT_RULES).excluded) == ["n3"]


def test_fleet_flagged_prints_the_nodes_whose_own_figures_are_low(tmp_path, capsys, monkeypatch):
    from xmfu.harness.fleet import outcome

    fleets = {"slow": _fleet({"n1": 0.19, "n2": 0.06, "n3": 0.19, "n4": 0.05}),
              "even": _fleet({"n1": 0.19, "n2": 0.18, "n3": 0.19, "n4": 0.185})}
    fleets["even"].pairs = [PairResult(a, b, busbw=Figure(v, v * 0.99, v * 1.01, "GB/s busbw", "t"))
                            for (a, b), v in {("n1", "n2"): 0.5, ("n3", "n4"): 0.51, ("n1", "n4"): 0.12,
                                              ("n2", "n3"): 0.49}.items()]
    monkeypatch.setattr(outcome, "gathered", lambda folder: (None, fleets[folder.name]))
    monkeypatch.setattr(outcome, "judged", lambda folder, found: (diagnose(found[1], DEFAULT_RULES), ()))
    assert cmd_flagged([str(tmp_path / "slow")]) == 0
    assert capsys.readouterr().out == "n2,n4\n"
    assert cmd_flagged([str(tmp_path / "even")]) == 0
    assert capsys.readouterr().out == "\n"
    assert cmd_flagged(["--links", str(tmp_path / "even")]) == 0
    assert capsys.readouterr().out == "n1:n4\n"
    # measured twice already (a resumed job judges the folder again): not a third time
    fleets["slow"].nodes["n2"].measured_again = True
    fleets["even"].pairs[2].measured_again = True
    assert cmd_flagged([str(tmp_path / "slow")]) == 0 and capsys.readouterr().out == "n4\n"
    assert cmd_flagged(["--links", str(tmp_path / "even")]) == 0 and capsys.readouterr().out == "\n"


def test_a_link_tested_again_counts_its_better_measurement(tmp_path):
    folder = tmp_path / "fleet"
    shutil.copytree(DATA, folder)
    once = gather.pair(folder, "n1", "n2", None)
    assert once.busbw is not None and not once.measured_again
    shutil.copytree(folder / "links" / "pair-n3-n4", folder / "links" / "pair-n1-n2-again")  # a faster measurement
    twice = gather.pair(folder, "n1", "n2", None)
    faster = gather.pair(folder, "n3", "n4", None).busbw
    assert twice.measured_again and twice.busbw is not None and twice.invalid == ""
    assert twice.busbw.value == max(once.busbw.value, faster.value)

