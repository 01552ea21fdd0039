"""The fleet's verdict page, `report.html` in the fleet folder: one self-contained HTML file (no script, no network;
every text escaped).

Its first screen is for a person: the verdict with its reasons, one table of the headline figures with the band
each was judged against, the findings (excluded nodes first, then links, then the nodes that could not run, named as
such and never as failed); a finding or caveat that many nodes share is said once, with the count and the list
folded. Then the node x check matrix (excluded nodes first), the pair matrix as a heat map, and each node's
figures with their 95% CIs and sources. For a thousand nodes it stays a few MB: the pair matrix is an HTML table up
to TABLE_HOSTS hosts and an image (one pixel per pair) above, and the nodes with nothing to say are folded.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from xmfu.harness.fleet.diagnose import Diagnosis, Finding, threshold
from xmfu.harness.fleet.gather import Figure, Fleet, NodeResult
from xmfu.harness.fleet.rules import FIGURES, Rule, RulesError, load
from xmfu.harness.fleet.spec import FleetSpec
from xmfu.harness.results.plots import figures
from xmfu.harness.results.render.html_table import html_table
from xmfu.harness.results.render.report import STYLE

SHOWN = 12  # findings of one reason code shown open; the rest are folded under a count
PARTNERS = 4  # links named per node in its row; more are summed up
LISTED = 8  # subjects named in a shared finding before the rest are folded
TABLE_HOSTS = 48  # up to this many hosts the pair matrix is an HTML table with a value per cell
OPEN_ROWS = 64  # above this many hosts the matrix shows the nodes with something to say; the others are folded
REASON_CHARS = 400  # of one reason on the verdict line
RATIO_RANGE = (0.5, 1.5)  # the heat map's colour scale: link busbw / the median pair
CNR = "could-not-run"
COLUMNS = ("ran", "matmul TFLOP/s", "node collective GB/s", "devices", "throttled", "doctor", "links")
STATES = {"ok": "ok", "flag": "flagged", "cnr": "could not run", "nm": "not measured"}
PAGE_STYLE = STYLE + """
.c-ok{background:#e3f4e3}.c-flag{background:#f8d0d0;font-weight:bold}.c-cnr{background:#dde3f0;color:#335}
.c-nm{background:#eee;color:#777}.heat td{text-align:right;min-width:34px}.heat td.flagged{outline:2px solid #000}
.legend span{padding:1px 6px;margin-right:6px}details{margin:4px 0}"""


def build(spec: FleetSpec, fleet: Fleet, d: Diagnosis, rules: Sequence[Rule] | None = None) -> str:
    """The page. `rules`: the rules `d` was judged by (default: the spec's rules file, else the built-in ones)."""
    order = _order(fleet, d)
    links = _links(fleet, d)
    sections = (("Headline figures", _headlines(fleet, d, _rules(spec, rules))),
                ("Findings", _findings(fleet, d, order) + _caveats(d.caveats)),
                ("Nodes and their checks", _matrix(fleet, d, order, links)),
                ("Links between nodes", _heat(fleet, d, order, links)),
                ("Each node", _details(fleet, d, order, links)))
    title = f"xmfu fleet {spec.fleet_id}"
    body = "".join(f"<h2>{escape(name)}</h2>{html}" for name, html in sections)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{PAGE_STYLE}</style></head><body>{_verdict(d)}<h1>{escape(title)}</h1>"
            f"<p>{escape(_summary(spec, fleet, d))}</p>{body}</body></html>")


def _rules(spec: FleetSpec, given: Sequence[Rule] | None) -> Sequence[Rule] | None:
    if given is not None:
        return given
    try:
        return load(spec.rules)
    except RulesError:
        return None  # the thresholds are then only those the findings carry


def _verdict(d: Diagnosis) -> str:
    """The verdict in bold, then its reasons; a reason naming hundreds of nodes is cut (the findings name all)."""
    said = "; ".join(r if len(r) <= REASON_CHARS else r[:REASON_CHARS] + "... (all of them under Findings)"
                     for r in d.reasons)
    return f'<p class="judgement"><b>{escape(d.verdict)}</b>{escape(": " + said if said else "")}</p>'


def _summary(spec: FleetSpec, fleet: Fleet, d: Diagnosis) -> str:
    return (f"{len(fleet.hosts)} nodes at level {spec.level}, {spec.pairs} link schedule ({len(fleet.pairs)} pairs), "
            f"job {', '.join(fleet.jobs) or 'not recorded'}: {len(d.admitted)} admitted, {len(d.excluded)} excluded")


def _order(fleet: Fleet, d: Diagnosis) -> list[str]:
    """Excluded nodes first (flagged, then those that could not run), then the admitted, each in the job's order."""
    def rank(host: str) -> int:
        found = d.excluded.get(host)
        return 2 if not found else 1 if all(f.code == CNR for f in found) else 0
    return sorted(fleet.hosts, key=lambda h: (rank(h), fleet.hosts.index(h)))


def _num(x: float | None) -> str:
    return "not measured" if x is None else f"{x:.4g}"


def _figure(f: Figure | None) -> str:
    if f is None:
        return "not measured"
    return f"{f.value:.4g} (95% CI {f.low:.4g}-{f.high:.4g}){' [contended]' if f.contended else ''}"


# --- the headline table ---------------------------------------------------------------------------------------

def _measured(fleet: Fleet, figure: str) -> str:
    if figure == "link_busbw_gbps":
        return f"{sum(p.busbw is not None for p in fleet.pairs)} of {len(fleet.pairs)} pairs"
    read = (lambda n: n.matmul) if figure == "matmul_tflops" else (lambda n: n.busbw)
    return f"{sum(read(n) is not None for n in fleet.nodes.values())} of {len(fleet.hosts)} nodes"


def _band(rule: Rule | None, limit: float | None, source: str) -> str:
    if rule is None:
        return f"flagged below {_num(limit)}; baseline: {source}"
    floor = f", or under the floor {rule.floor:g}" if rule.floor is not None else ""
    return (f"flagged when its whole 95% CI is below {_num(limit)}: under both {100 * (1 - rule.below_median):g}% "
            f"of the median and the median - {rule.sigmas:g} sigma{floor}; baseline: {source}")


def _headlines(fleet: Fleet, d: Diagnosis, rules: Sequence[Rule] | None) -> str:
    by_rule = {r.figure: r for r in rules or ()}
    rows, marks = [], []
    for name, (unit, what) in FIGURES.items():
        base, rule = d.baselines.get(name), by_rule.get(name)
        flagged = [f for f in d.findings if f.figure == name]
        limit = flagged[0].threshold if flagged else (threshold(rule, base) if rule and base else None)
        if base is None:
            rows.append([what, unit, "not judged", "", "", "fewer than 3 measured and no --baseline",
                         _measured(fleet, name), ""])
        else:
            rows.append([what, unit, f"{base.median:.4g}", f"{base.sigma:.3g}", _num(limit),
                         _band(rule, limit, base.source), _measured(fleet, name), len(flagged)])
        marks.append("bad" if flagged else None)
    for name, f in fleet.all_figures.items():
        rows.append([f"{name} (over the nodes together)", f.unit if f else "", _figure(f), "", "",
                     "not judged: one figure for the whole fleet" + (f"; {f.source}" if f else ""), "", ""])
        marks.append(None)
    return html_table(["figure", "unit", "fleet median", "robust spread (sigma)", "threshold", "band and source",
                       "measured by", "flagged"], rows, marks)


# --- findings, a finding many subjects share said once --------------------------------------------------------

def _general(detail: str, subject: str) -> str:
    """The detail with its own subject's name taken out, so findings that differ only by it read as one."""
    return re.sub(rf"(?<![\w.-]){re.escape(subject)}(?![\w.-])", "the node", detail)


def _groups(found: Iterable[Finding]) -> list[tuple[str, str, list[str]]]:
    """(code, detail, subjects), one per distinct detail; a detail one subject alone has keeps its name."""
    by: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    for f in found:
        by[(f.code, _general(f.detail, f.subject))].append(f)
    return [(code, general if len(fs) > 1 else fs[0].detail, [f.subject for f in fs])
            for (code, general), fs in by.items()]


def _subjects(names: Sequence[str]) -> str:
    if len(names) <= LISTED:
        return escape(", ".join(names))
    return (f"<details><summary>{len(names)}: {escape(', '.join(names[:3]))}, ...</summary>"
            f"{escape(', '.join(names))}</details>")


def _finding_rows(groups: Sequence[tuple[str, str, list[str]]]) -> str:
    return "".join(f"<tr><td>{escape(code)}</td><td>{_subjects(subjects)}</td><td>{escape(detail)}</td></tr>"
                   for code, detail, subjects in groups)


def _findings(fleet: Fleet, d: Diagnosis, order: list[str]) -> str:
    """Excluded nodes' findings first, then the links', then the nodes that could not run."""
    place = {h: i for i, h in enumerate(order)}
    on_nodes = sorted((f for f in d.findings if f.subject in fleet.nodes and f.code != CNR),
                      key=lambda f: (place[f.subject], f.code))
    on_links = [f for f in d.findings if f.subject not in fleet.nodes]
    not_run = sorted((f for f in d.findings if f.code == CNR), key=lambda f: place.get(f.subject, 0))
    parts = [("nodes excluded", _groups(on_nodes)), ("links", _groups(on_links)),
             ("could not run (not judged, not a failure: xmfu fleet resume runs them)", _groups(not_run))]
    out = []
    for title, groups in parts:
        if not groups:
            continue
        by_code: dict[str, list[tuple[str, str, list[str]]]] = defaultdict(list)
        for g in groups:
            by_code[g[0]].append(g)
        shown = [g for gs in by_code.values() for g in gs[:SHOWN]]
        folded = [g for gs in by_code.values() for g in gs[SHOWN:]]
        more = (f"<details><summary>and {len(folded)} more ({', '.join(sorted({g[0] for g in folded}))})</summary>"
                f"<table>{_finding_rows(folded)}</table></details>" if folded else "")
        out.append(f"<h3>{escape(title)}</h3><table><tr><th>reason</th><th>who</th><th>detail</th></tr>"
                   f"{_finding_rows(shown)}</table>{more}")
    return "".join(out) or "<p>No findings: every node and link measured is within its threshold.</p>"


def _caveats(caveats: Sequence[str]) -> str:
    """Caveats that begin alike (every node's doctor says: ...) said once, with their count and list folded."""
    by: dict[str, list[str]] = defaultdict(list)
    for c in caveats:
        head, sep, rest = c.partition(": ")
        by[head if sep else c].append(rest if sep else "")
    items = []
    for head, rests in by.items():
        if len(rests) == 1:
            items.append(escape(f"{head}: {rests[0]}" if rests[0] else head))
        else:
            listed = "".join(f"<li>{escape(r)}</li>" for r in rests)
            items.append(f"<details><summary>{escape(head)}: {len(rests)} things (shared by all, so held against "
                         f"no node)</summary><ul>{listed}</ul></details>")
    return "<h3>Caveats</h3><ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>" if items else ""


# --- the node x check matrix ----------------------------------------------------------------------------------

def _links(fleet: Fleet, d: Diagnosis) -> dict[str, Any]:
    """Each host's links as (busbw or None, partner, flagged), read once (an exhaustive schedule of a thousand
    nodes has half a million), and the names of the pairs flagged."""
    slow = {f.subject for f in d.findings if f.subject not in fleet.nodes}
    mine: dict[str, list[tuple[float | None, str, bool]]] = defaultdict(list)
    for p in fleet.pairs:
        value, bad = (p.busbw.value if p.busbw else None), p.name in slow
        mine[p.a].append((value, p.b, bad))
        mine[p.b].append((value, p.a, bad))
    return {"mine": mine, "slow": slow, "codes": {f.code for f in d.findings if f.figure == "link_busbw_gbps"}}


def _column(f: Finding, link_codes: set[str]) -> str:
    named = {"matmul_tflops": COLUMNS[1], "node_busbw_gbps": COLUMNS[2]}
    if f.figure in named:
        return named[f.figure]
    by_code = {"missing-device": COLUMNS[3], "throttled": COLUMNS[4], "doctor": COLUMNS[5]}
    return by_code.get(f.code, COLUMNS[6] if f.code in link_codes else COLUMNS[0])


def _cells(n: NodeResult, found: Sequence[Finding], links: dict[str, Any]) -> list[tuple[str, str]]:
    """(state, text) per column."""
    if not n.ran:
        return [("cnr", "could not run")] + [("cnr", "not run")] * (len(COLUMNS) - 1)
    flagged = defaultdict(list)
    for f in found:
        flagged[_column(f, links["codes"])].append(f)
    texts = {COLUMNS[0]: "ran" if not flagged[COLUMNS[0]] else f"ran; {len(flagged[COLUMNS[0]])} problems",
             COLUMNS[1]: None if n.matmul is None else f"{n.matmul.value:.4g}",
             COLUMNS[2]: None if n.busbw is None else f"{n.busbw.value:.4g}",
             COLUMNS[3]: None if n.devices is None else str(n.devices),
             COLUMNS[4]: ", ".join(f"{k} {v:.0%}" for k, v in sorted(n.throttled.items())) or "none seen",
             COLUMNS[5]: f"{len(flagged[COLUMNS[5]])} of its own" if flagged[COLUMNS[5]] else "nothing of its own",
             COLUMNS[6]: _link_text(n.host, links)}
    return [("nm", "not measured") if texts[c] is None else ("flag" if flagged[c] or (c == COLUMNS[6] and any(
        bad for _, _, bad in links["mine"][n.host])) else "ok", texts[c]) for c in COLUMNS]


def _link_text(host: str, links: dict[str, Any]) -> str | None:
    mine = links["mine"][host]
    if not mine:
        return None
    slow = sum(bad for _, _, bad in mine)
    measured = sum(v is not None for v, _, _ in mine)
    missing = f", {len(mine) - measured} without result" if measured < len(mine) else ""
    return (f"{slow} of {measured} slow" if slow else f"{measured} ok") + missing


def _matrix(fleet: Fleet, d: Diagnosis, order: list[str], links: dict[str, Any]) -> str:
    mine = defaultdict(list)
    for f in d.findings:
        mine[f.subject].append(f)
    rows = [(h, _cells(fleet.nodes[h], mine[h], links)) for h in order]
    head = "<tr><th>node</th>" + "".join(f"<th>{escape(c)}</th>" for c in COLUMNS) + "</tr>"

    def table(chosen: Sequence[tuple[str, list[tuple[str, str]]]]) -> str:
        return "<table>" + head + "".join(
            f"<tr><td>{escape(h)}</td>" + "".join(f'<td class="c-{s}">{escape(t)}</td>' for s, t in cells) + "</tr>"
            for h, cells in chosen) + "</table>"

    legend = '<p class="legend">' + "".join(f'<span class="c-{k}">{v}</span>' for k, v in STATES.items()) + "</p>"
    plain = [r for r in rows if all(s == "ok" for s, _ in r[1])]
    if len(rows) <= OPEN_ROWS or not plain:
        return legend + table(rows)
    said = [r for r in rows if r not in plain]
    return (legend + table(said) + f"<details><summary>{len(plain)} nodes with every check ok (above {OPEN_ROWS} "
            f"nodes they are folded)</summary>{table(plain)}</details>")


# --- the pair matrix as a heat map ----------------------------------------------------------------------------

def _median(fleet: Fleet, d: Diagnosis) -> float | None:
    base = d.baselines.get("link_busbw_gbps")
    values = sorted(p.busbw.value for p in fleet.pairs if p.busbw is not None)
    return base.median if base else (values[len(values) // 2] if values else None)


def _colour(ratio: float) -> str:
    import matplotlib
    from matplotlib.colors import Normalize, to_hex

    return str(to_hex(matplotlib.colormaps["RdYlGn"](Normalize(*RATIO_RANGE, clip=True)(ratio))))


def _heat(fleet: Fleet, d: Diagnosis, order: list[str], links: dict[str, Any]) -> str:
    median = _median(fleet, d)
    if not fleet.pairs or not median:
        return "<p>No link was measured.</p>"
    measured = sum(p.busbw is not None for p in fleet.pairs)
    said = (f"{measured} of {len(fleet.pairs)} scheduled pairs measured, {len(links['slow'])} flagged; colour: a "
            f"link's busbw against the median pair ({median:.4g} GB/s busbw), red at {RATIO_RANGE[0]:.0%} or less, "
            f"yellow at 100%, green at {RATIO_RANGE[1]:.0%} or more; blank: not tested. ")
    if len(order) <= TABLE_HOSTS:
        return f"<p>{escape(said)}Each cell: busbw / median; outlined: flagged.</p>" + _heat_table(
            fleet, order, links, median)
    return (f"<p>{escape(said)}Above {TABLE_HOSTS} nodes the matrix is an image, one pixel per pair, nodes in the "
            "order of the matrix above; flagged links are ringed in black and listed under Findings with their "
            "values.</p>" + _heat_image(fleet, order, links, median))


def _heat_table(fleet: Fleet, order: list[str], links: dict[str, Any], median: float) -> str:
    at = {frozenset((p.a, p.b)): p for p in fleet.pairs}
    rows = []
    for a in order:
        cells = []
        for b in order:
            p = at.get(frozenset((a, b))) if a != b else None
            if p is None:
                cells.append("<td></td>")
            elif p.busbw is None:
                cells.append(f'<td class="c-nm" title="{escape(p.name)}">no result</td>')
            else:
                mark = ' class="flagged"' if p.name in links["slow"] else ""
                tip = escape(f"{p.name}: {_figure(p.busbw)} GB/s busbw")
                ratio = p.busbw.value / median
                ink = "#fff" if not 0.7 <= ratio <= 1.3 else "#000"  # dark ends of the scale take white text
                cells.append(f'<td{mark} style="background:{_colour(ratio)};color:{ink}" title="{tip}">'
                             f"{ratio:.0%}</td>")
        rows.append(f"<tr><th>{escape(a)}</th>{''.join(cells)}</tr>")
    head = "<tr><th></th>" + "".join(f"<th>{escape(h)}</th>" for h in order) + "</tr>"
    return f'<table class="heat">{head}{"".join(rows)}</table>'


@figures.styled
def _heat_figure(fleet: Fleet, order: list[str], links: dict[str, Any], median: float) -> Any:
    import numpy as np
    from matplotlib.colors import Normalize

    index = {h: i for i, h in enumerate(order)}
    grid = np.full((len(order), len(order)), np.nan)
    ringed = []
    for p in fleet.pairs:
        if p.busbw is not None:
            i, j = index[p.a], index[p.b]
            grid[i, j] = grid[j, i] = p.busbw.value / median
            ringed += [(i, j), (j, i)] if p.name in links["slow"] else []
    fig, (ax,) = figures.figure(8.5, 9.0)
    cmap = figures_cmap()
    drawn = ax.imshow(grid, cmap=cmap, norm=Normalize(*RATIO_RANGE), interpolation="none", aspect="equal")
    if ringed:
        ax.scatter([j for _, j in ringed], [i for i, _ in ringed], s=60, facecolors="none", edgecolors="black")
    ax.grid(False)
    ax.set_xlabel("node (index in the matrix's order)")
    ax.set_ylabel("node")
    fig.colorbar(drawn, ax=ax, shrink=0.8, label="link busbw / median pair")
    figures.title(fig, "Links: busbw of each tested pair against the median pair", f"{len(order)} nodes")
    return fig


def figures_cmap() -> Any:
    """A stepped colour map: the image of a thousand nodes compresses to a fraction of a smooth one."""
    import matplotlib

    return matplotlib.colormaps["RdYlGn"].resampled(20).with_extremes(bad="white")


def _heat_image(fleet: Fleet, order: list[str], links: dict[str, Any], median: float) -> str:
    try:
        return figures.svg(_heat_figure(fleet, order, links, median), "fleet-links")
    except RuntimeError as exc:  # no matplotlib: the findings still list every flagged link
        return f'<p class="note">{escape(str(exc))}</p>'


# --- each node ------------------------------------------------------------------------------------------------

def _partners(mine: Sequence[tuple[float | None, str, bool]]) -> str:
    """Each partner's busbw; with many (an exhaustive schedule), the lowest few and the median of all."""
    said = sorted((-1.0 if v is None else v, partner) for v, partner, _ in mine)
    text = "; ".join(f"{partner}: {_num(v if v >= 0 else None)}" for v, partner in said[:PARTNERS])
    if len(said) <= PARTNERS:
        return text
    return f"{len(said)} links, the lowest {text}; median {said[len(said) // 2][0]:.4g}"


def _details(fleet: Fleet, d: Diagnosis, order: list[str], links: dict[str, Any]) -> str:
    rows, marks = [], []
    for h in order:
        n = fleet.nodes[h]
        state = ("excluded: " + ", ".join(sorted({f.code for f in d.excluded[h]}))) if h in d.excluded else "admitted"
        step = (f"rc {n.step.rc}, {n.step.started} to {n.step.finished}" if n.step else "no step record")
        own = {f.detail for f in d.excluded.get(h, ()) if f.code == "doctor"}  # the shared ones are caveats
        notes = [*n.failed_parts, *n.invalid, *(f"doctor: {p}" for p in n.doctor_problems if p in own)]
        pairs = _partners(links["mine"][h])
        rows.append([h, state, _figure(n.matmul), n.matmul.source if n.matmul else "", _figure(n.busbw),
                     n.busbw.source if n.busbw else "", _num(n.devices), step, pairs, "; ".join(notes)])
        marks.append("bad" if any(f.code != CNR for f in d.excluded.get(h, ())) else None)
    return ("<p>Each figure with its 95% CI from its own samples and the bundle and case it was taken from (only "
            "bundles that validate are read).</p>" + html_table(
                ["node", "judged", "matmul TFLOP/s", "source", "node collective GB/s busbw", "source", "devices",
                 "its check's step", "links (partner: GB/s busbw)", "notes"], rows, marks))
