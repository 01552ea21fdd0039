"""The diagnosis: figures against the fleet's robust baseline with the rules' thresholds, a figure flagged only when
its whole CI is below; could-not-run said as such; a node whose every link is slow named; the verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from xmfu.harness.fleet.diagnose import FAIL, NOT_JUDGED, PASS, Baseline, diagnose, why_not_run
from xmfu.harness.fleet.gather import Figure, Fleet, NodeResult, PairResult, StepRecord
from xmfu.harness.fleet.rules import DEFAULT_RULES, RulesError, load


def _figure(value: float, spread: float = 0.01) -> Figure:
    return Figure(value, value * (1 - spread), value * (1 + spread), "TFLOP/s", "test")


def _fleet(matmul: dict[str, float], links: dict[tuple[str, str], float] | None = None, **nodes_kw) -> Fleet:
    hosts = list(matmul)
    nodes = {h: NodeResult(h, ran=True, matmul=_figure(v), busbw=_figure(100.0), devices=8) for h, v in matmul.items()}
    for h, changes in nodes_kw.items():
        for k, v in changes.items():
            setattr(nodes[h], k, v)
    pairs = [PairResult(a, b, busbw=_figure(v)) for (a, b), v in (links or {}).items()]
    return Fleet(Path("/f"), hosts, nodes, pairs, {}, {}, ["1"])


RING = {("n1", "n2"): 50.0, ("n3", "n4"): 50.5, ("n1", "n4"): 49.8, ("n2", "n3"): 50.2}


def test_a_fleet_of_equals_passes_and_noise_alone_flags_nothing():
    d = diagnose(_fleet({"n1": 700, "n2": 705, "n3": 690, "n4": 702}, RING), DEFAULT_RULES)
    assert d.verdict == PASS and d.findings == [] and d.admitted == ["n1", "n2", "n3", "n4"]
    assert d.baselines["matmul_tflops"].median == pytest.approx(701)


def test_a_slow_node_is_excluded_with_its_reason_and_the_figures():
    d = diagnose(_fleet({"n1": 700, "n2": 705, "n3": 450, "n4": 702}, RING), DEFAULT_RULES)
    assert d.verdict == FAIL and list(d.excluded) == ["n3"]
    (f,) = d.excluded["n3"]
    # three others are too few for a spread: 10% below the median of their lower 95% bounds (702's, at 1%)
    assert f.code == "slow-matmul" and f.value == 450 and f.threshold == pytest.approx(702 * 0.99 * 0.9)


def test_with_few_peers_their_lower_bounds_judge_not_their_disagreement():
    """On the local cluster: n4 dead, n1 and n2 30% apart, n3 held to a tenth of a core at a third of their speed
    (its CI 0.0189-0.0212). A spread from two values (1.4826 x half their gap, 4 sigmas) left no threshold; their
    lower bounds do. Two slow nodes of four are each judged against a median the other cannot move."""
    fleet = _fleet({"n1": 0.0728, "n2": 0.053, "n3": 0.0199, "n4": 1.0}, RING)
    fleet.nodes["n1"].matmul = Figure(0.0728, 0.0661, 0.0838, "TFLOP/s", "n1")
    fleet.nodes["n2"].matmul = Figure(0.053, 0.0487, 0.0689, "TFLOP/s", "n2")
    fleet.nodes["n3"].matmul = Figure(0.0199, 0.0189, 0.0212, "TFLOP/s", "n3")
    fleet.nodes["n4"] = NodeResult("n4")  # could not run
    d = diagnose(fleet, DEFAULT_RULES)
    (f,) = [f for f in d.findings if f.code == "slow-matmul"]
    assert f.subject == "n3" and f.threshold == pytest.approx(0.9 * (0.0661 + 0.0487) / 2)
    two = diagnose(_fleet({"n1": 700, "n2": 300, "n3": 705, "n4": 310}, RING), DEFAULT_RULES)
    assert sorted(f.subject for f in two.findings if f.code == "slow-matmul") == ["n2", "n4"]


def test_in_a_small_fleet_each_node_is_judged_against_the_others():
    """Three nodes measured, one four times slower: its own distance would have widened the fleet's spread past any
    threshold (seen on the local Slurm cluster, the fourth node dead); judged against the other two, it is flagged,
    and they are not."""
    fleet = _fleet({"n1": 1.2e-3, "n2": 0.97e-3, "n3": 0.225e-3, "n4": 1.0}, RING)
    fleet.nodes["n4"] = NodeResult("n4")  # could not run
    d = diagnose(fleet, DEFAULT_RULES)
    assert [f.subject for f in d.findings if f.code == "slow-matmul"] == ["n3"]


def test_a_low_figure_whose_ci_reaches_the_threshold_is_not_flagged():
    fleet = _fleet({"n1": 700, "n2": 705, "n3": 620, "n4": 702}, RING)
    fleet.nodes["n3"].matmul = Figure(620, 560, 640, "TFLOP/s", "noisy")  # its CI reaches above 0.9 x 701
    assert diagnose(fleet, DEFAULT_RULES).verdict == PASS


def test_a_slow_link_is_named_and_a_node_whose_every_link_is_slow_is_blamed():
    one = dict(RING)
    one[("n1", "n2")] = 20.0
    d = diagnose(_fleet({"n1": 700, "n2": 705, "n3": 699, "n4": 702}, one), DEFAULT_RULES)
    assert d.verdict == FAIL and [f.subject for f in d.findings] == ["pair-n1-n2"] and d.excluded == {}
    hosts = [f"n{i}" for i in range(1, 9)]
    ring = {(hosts[i], hosts[(i + 1) % 8]): 50.0 + i / 10 for i in range(8)}
    ring[("n1", "n2")], ring[("n8", "n1")] = 20.0, 21.0  # both of n1's links
    d = diagnose(_fleet(dict.fromkeys(hosts, 700.0), ring), DEFAULT_RULES)
    assert list(d.excluded) == ["n1"] and d.excluded["n1"][0].code == "slow-link"


def test_a_node_that_could_not_run_is_said_so_and_the_verdict_is_not_judged():
    step = StepRecord("node-n4", ("n4",), 1, "t0", "t1", "slurmstepd: error: *** STEP 3.4 ON n4 CANCELLED AT "
                      "2026-12-02T03:00:00 DUE TO TIME LIMIT ***")
    fleet = _fleet({"n1": 700, "n2": 705, "n3": 699, "n4": 0.0}, RING)
    fleet.nodes["n4"] = NodeResult("n4", step)
    d = diagnose(fleet, DEFAULT_RULES)
    assert d.verdict == NOT_JUDGED and "could not run: n4" in d.reasons[0]
    assert d.excluded["n4"][0].code == "could-not-run" and "time limit" in d.excluded["n4"][0].detail
    assert "failed" not in d.excluded["n4"][0].detail
    assert "no step record" in why_not_run("n5", None)


def test_missing_devices_throttling_parts_and_a_doctor_problem_only_some_nodes_have():
    fleet = _fleet({"n1": 700, "n2": 705, "n3": 699, "n4": 702}, RING,
                   n1={"devices": 7}, n2={"throttled": {"hw_slowdown": 0.4}}, n3={"failed_parts": ["matmul exited 1"]})
    for n in fleet.nodes.values():
        n.doctor_problems = ["nvidia-ml-py is not installed"]
    fleet.nodes["n4"].doctor_problems = [*fleet.nodes["n4"].doctor_problems, "clocks not locked"]
    d = diagnose(fleet, DEFAULT_RULES)
    codes = {h: [f.code for f in fs] for h, fs in d.excluded.items()}
    assert codes == {"n1": ["missing-device"], "n2": ["throttled"], "n3": ["part-failed"], "n4": ["doctor"]}
    assert d.caveats[0] == "every node's doctor says: nvidia-ml-py is not installed"


def test_a_given_baseline_judges_a_fleet_too_small_for_its_own():
    fleet = _fleet({"n1": 700, "n2": 400})
    assert diagnose(fleet, DEFAULT_RULES).verdict == NOT_JUDGED  # two nodes: no robust baseline
    given = {"matmul_tflops": Baseline("matmul_tflops", 700.0, 5.0, 0, "the expectation x.yaml")}
    d = diagnose(fleet, DEFAULT_RULES, given.get)
    assert list(d.excluded) == ["n2"] and "the expectation x.yaml" in d.excluded["n2"][0].detail


def test_a_rules_file_replaces_a_rule_and_a_bad_one_says_what_is_wrong(tmp_path):
    good = tmp_path / "rules.yaml"
    good.write_text("rules:\n  - figure: link_busbw_gbps\n    below_median: 0.3\n    floor: 40\n"
                    "    reason: the vendor's floor\n")
    rules = {r.figure: r for r in load(good)}
    assert rules["link_busbw_gbps"].floor == 40 and rules["link_busbw_gbps"].code == "slow-link"
    assert rules["matmul_tflops"] == DEFAULT_RULES[0]
    for text, said in (("rules: 3", "a `rules:` list"), ("rules:\n  - figure: power\n    reason: x", "allowed"),
                       ("rules:\n  - figure: matmul_tflops", "reason"),
                       ("rules:\n  - figure: matmul_tflops\n    reason: r\n    sigmas: -1", "number >= 0"),
                       ("rules:\n  - {figure: matmul_tflops, reason: r, colour: red}", "unknown keys colour")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(RulesError, match=said):
            load(bad)


def test_a_check_ended_by_a_signal_could_not_run_and_is_not_a_failed_part():
    """scancel of the job (or a step past its limit) while a node's matmul ran: its suite records the part as exited
    130 (SIGTERM, as xmfu exits on it); the node could not run its check, which is not the node failing."""
    fleet = _fleet({"n1": 700, "n2": 705, "n3": 690, "n4": 702}, RING)
    fleet.nodes["n2"].interrupted = ["matmul exited 130"]
    d = diagnose(fleet, DEFAULT_RULES)
    assert [(f.subject, f.code) for f in d.findings] == [("n2", "could-not-run")]
    assert "ended by a signal (matmul exited 130)" in d.findings[0].detail and d.verdict == NOT_JUDGED
