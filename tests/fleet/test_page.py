"""The fleet's verdict page (harness/fleet/page.py, issue 43 item 2.4): a fleet built in memory (no Slurm) with a
slow node, a slow link, a node that could not run and doctor findings every node shares, judged by diagnose() and
drawn: the verdict first, excluded nodes first, reason codes named, could-not-run never called failed, a shared
caveat said once, every text escaped, the pair heat map; a page for 1,024 nodes stays a few MB."""

from __future__ import annotations

import re
from pathlib import Path

from xmfu.harness.fleet import outcome, page, schedule, spec
from xmfu.harness.fleet.diagnose import FAIL, diagnose
from xmfu.harness.fleet.gather import Figure, Fleet, NodeResult, PairResult, StepRecord
from xmfu.harness.fleet.rules import DEFAULT_RULES

SHARED = ["no accelerator visible: runs measure this CPU", "matmul/helion will be skipped: helion is not installed"]
EVIL = "<b>x</b>"


def _figure(value: float, unit: str, where: str) -> Figure:
    return Figure(value, value * 0.99, value * 1.01, unit, f"{where} case-1")


def _fleet(tmp_path: Path, hosts: list[str], slow_node: str | None = None, not_run: str | None = None,
           slow_link: tuple[int, int] | None = None) -> Fleet:
    """Nodes a few percent apart; `slow_node` at half the matmul, `not_run` ended by its time limit, the pair
    `slow_link` (indices of the schedule) at a third of the others."""
    nodes = {}
    for i, h in enumerate(hosts):
        wobble = 1 + 0.01 * (i % 5)
        step = StepRecord(f"node-{h}", (h,), 0, "2026-12-01T00:00:00Z", "2026-12-01T00:01:00Z")
        if h == not_run:
            nodes[h] = NodeResult(h, StepRecord(f"node-{h}", (h,), 1, "t0", "t1",
                                                f"slurmstepd: error: *** STEP 7.{i} ON {h} CANCELLED AT t1 DUE TO "
                                                "TIME LIMIT ***"))
            continue
        nodes[h] = NodeResult(h, step, ran=True, devices=8, doctor_problems=list(SHARED),
                              matmul=_figure((0.5 if h == slow_node else 1.0) * 700 * wobble, "TFLOP/s", f"nodes/{h}"),
                              busbw=_figure(300 * wobble, "GB/s busbw", f"nodes/{h}"))
    pairs = []
    for a, b in (p for r in schedule.rounds("quick", len(hosts)) for p in r):
        value = (40.0 if (a, b) == slow_link else 120.0) * (1 + 0.01 * ((a + b) % 4))
        pair = PairResult(hosts[a], hosts[b])
        pair.busbw = _figure(value, "GB/s busbw", f"links/{pair.name}")
        pairs.append(pair)
    return Fleet(tmp_path, list(hosts), nodes, pairs, {"all-collectives": None, "all-training": None}, {}, ["7"])


def _spec(tmp_path: Path, n: int) -> spec.FleetSpec:
    return spec.FleetSpec("f1", n, "quick", "quick", str(tmp_path))


def _small(tmp_path: Path) -> tuple[spec.FleetSpec, Fleet, str]:
    hosts = ["n0", "n1", "n2", EVIL, "n4", "n5", "n6", "n7"]
    fleet = _fleet(tmp_path, hosts, slow_node="n4", not_run="n6", slow_link=(0, 1))
    d = diagnose(fleet, DEFAULT_RULES)
    assert d.verdict == FAIL and set(d.excluded) == {"n4", "n6"}
    return _spec(tmp_path, len(hosts)), fleet, page.build(_spec(tmp_path, len(hosts)), fleet, d)


def _section(html: str, title: str) -> str:
    return html.split(f"<h2>{title}</h2>", 1)[1].split("<h2>", 1)[0]


def _row(html: str, host: str) -> str:
    return re.search(rf"<tr><td>{re.escape(host)}</td>.*?</tr>", html).group(0)


def test_the_first_screen_is_the_verdict_the_headline_figures_and_the_findings(tmp_path):
    _, _, html = _small(tmp_path)
    body = html.split("<body>", 1)[1]
    assert body.startswith('<p class="judgement"><b>FAIL</b>: ')
    assert body.index("<h2>Headline figures</h2>") < body.index("<h2>Findings</h2>") < body.index(
        "<h2>Nodes and their checks</h2>") < body.index("<h2>Links between nodes</h2>") < body.index(
        "<h2>Each node</h2>")
    heads = _section(html, "Headline figures")
    assert "the node&#x27;s best matmul" in heads and "this fleet&#x27;s 7 nodes" in heads and "7 of 8 nodes" in heads
    assert "flagged when its whole 95% CI is below" in heads and "8 of 8 pairs" in heads
    found = _section(html, "Findings")
    for code in ("slow-matmul", "slow-link", "could-not-run"):
        assert f"<td>{code}</td>" in found
    # excluded nodes, then links, then the nodes that could not run
    assert found.index("slow-matmul") < found.index("slow-link") < found.index("could-not-run")


def test_excluded_nodes_come_first_and_could_not_run_is_never_called_failed(tmp_path):
    _, _, html = _small(tmp_path)
    matrix = _section(html, "Nodes and their checks")
    order = re.findall(r"<tr><td>([^<]*)</td>", matrix)
    assert order[:2] == ["n4", "n6"] and order[2] == "n0"  # flagged, then could not run, then the admitted
    assert 'class="c-flag">' in _row(matrix, "n4")
    not_run = _row(matrix, "n6")
    assert "could not run" in not_run and "c-cnr" in not_run and "fail" not in not_run.lower()
    found = _section(html, "Findings")
    said = found.split("could not run (not judged, not a failure", 1)[1]
    assert "ran past its time limit" in said and "failed" not in said.lower()
    assert '<td class="c-flag">1 of 2 slow</td>' in _row(matrix, "n0")  # its link to n1 is the slow one


def test_a_caveat_every_node_shares_is_said_once_and_everything_is_escaped(tmp_path):
    _, _, html = _small(tmp_path)
    for problem in SHARED:
        assert html.count(problem) == 1
    assert "every node&#x27;s doctor says: 2 things" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and EVIL not in html
    assert "<script" not in html and "src=" not in html and "http" not in html.split("<body>", 1)[1]


def test_the_pair_matrix_is_a_heat_map_with_untested_pairs_blank(tmp_path):
    _, fleet, html = _small(tmp_path)
    heat = _section(html, "Links between nodes")
    assert '<table class="heat">' in heat and "background:#" in heat
    assert heat.count('class="flagged"') == 2  # the slow pair, both of its cells
    assert heat.count("<td></td>") == 8 * 8 - 2 * len(fleet.pairs)


def test_the_page_is_written_beside_the_verdict(tmp_path):
    s, fleet, _ = _small(tmp_path)
    tmp_path.joinpath("f1").mkdir()
    s = spec.FleetSpec("f1", 8, "quick", "quick", str(tmp_path))
    spec.write(s)
    outcome.write(s.folder, fleet, diagnose(fleet, DEFAULT_RULES))
    assert (s.folder / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_a_thousand_nodes_make_a_page_of_a_few_mb_with_the_pair_matrix_as_an_image(tmp_path):
    hosts = [f"node{i:04d}" for i in range(1024)]
    fleet = _fleet(tmp_path, hosts, slow_node="node0500", not_run="node0900", slow_link=(10, 11))
    d = diagnose(fleet, DEFAULT_RULES)
    assert set(d.excluded) == {"node0500", "node0900"}
    html = page.build(_spec(tmp_path, 1024), fleet, d)
    assert len(html.encode()) < 4_000_000
    heat = _section(html, "Links between nodes")
    assert '<svg class="plot"' in heat and "<table" not in heat and "Above 48 nodes the matrix is an image" in heat
    matrix = _section(html, "Nodes and their checks")
    assert matrix.index("node0500") < matrix.index("node0900") < matrix.index("<details>")  # the rest folded


def test_the_page_renders_in_headless_chromium_verdict_first(tmp_path):
    from tests.results.test_report import ink, render

    _, _, html = _small(tmp_path)
    path = tmp_path / "fleet.html"
    path.write_text(html)
    shot, dom, stderr = render(path, tmp_path, size=(1300, 1500))
    assert "CONSOLE" not in stderr and ink(shot)[0] > 0.02 and ink(shot)[1] > 500  # coloured cells drawn
    body = dom.split("<body>", 1)[1]
    assert body.startswith('<p class="judgement"><b>FAIL</b>') and "&lt;b&gt;x&lt;/b&gt;" in body
