"""A suite's report: its folder read back (every node's record and bundles), the verdict page, then the
report of every bundle (harness/results/render/report.py), in one self-contained HTML file.

The folder is what harness/suites/suite.py writes: `<host>/node.json` per node (its parts, their bundles relative to
the folder, doctor's findings) and the bundles. Every bundle is validated as it is read; one that fails is
named, never shown. Every text is escaped.

The verdict page opens as the fleet's does (harness/fleet/page.py): the verdict, one table of the headline figures
with the band or ceiling each is read against, the findings, then notes. A reason many figures share (no public
reference on a device the table does not hold) is said once, naming them; a share above 100% of a ceiling (the
achievable or datasheet peak, the link) is flagged, never printed as a plain percentage.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import msgspec

from xmfu.harness.machine.references import Bands, default_bands
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.plots import figures
from xmfu.harness.results.render import report
from xmfu.harness.results.render.html_table import html_table
from xmfu.harness.results.schema.records import NodeRecord
from xmfu.harness.suites import judgement, verdict, yardsticks

NODE_RECORD = "node.json"


@dataclass
class Node:
    record: dict[str, Any]
    parts: dict[str, tuple[str, list[Bundle]]]  # part name -> (kind, bundles)

    @property
    def host(self) -> str:
        return str(self.record.get("host"))


def _bundle(root: Path, relative: str, problems: list[str]) -> Bundle | None:
    folder = (root / relative).resolve()
    if not folder.is_relative_to(root.resolve()):  # a record naming a folder outside the suite is not followed
        problems.append(f"{relative}: outside the suite folder, not read")
        return None
    loaded = load_bundle(folder)
    if loaded.problems or loaded.bundle is None:
        problems.append(f"{relative}: not a valid bundle ({loaded.problems[0] if loaded.problems else 'unreadable'})")
        return None
    return loaded.bundle


def load(root: Path) -> tuple[list[Node], list[str]]:
    """Every node of the suite folder, and the problems met reading it."""
    nodes, problems = [], []
    for path in sorted(root.glob(f"*/{NODE_RECORD}")):
        try:
            raw = path.read_bytes()
            msgspec.json.decode(raw, type=NodeRecord)  # validated before anything it says is used
            record = json.loads(raw)
        except (OSError, ValueError, msgspec.MsgspecError) as exc:
            problems.append(f"{path.relative_to(root)}: unreadable ({exc})")
            continue
        parts = {}
        for part in record.get("parts") or []:
            found = [_bundle(root, rel, problems) for rel in part.get("bundles") or []]
            parts[part["name"]] = (part["kind"], [b for b in found if b is not None])
            if not part.get("bundles") and part.get("exit_code") is not None:
                problems.append(f"{record.get('host')}: part {part['name']} wrote no bundle (exit {part['exit_code']})")
        nodes.append(Node(record, parts))
    return nodes, problems


def figures_of(nodes: list[Node], price: float | None, threshold: float, energy: Any = None) -> dict[str, Any]:
    figures = {n.host: verdict.node(n.parts, price, threshold, energy) for n in nodes}
    ranks = [b for n in nodes for kind, bundles in n.parts.values() if kind == "ranks" for b in bundles]
    out = {"hosts": [n.host for n in nodes], "nodes": figures, "collectives": verdict.collectives(ranks),
           "node_comparison": verdict.compare_nodes(figures, threshold) if len(nodes) > 1 else {},
           "doctor": {n.host: (n.record.get("doctor") or {}).get("problems") for n in nodes},
           "scale": sorted({str(n.record.get("scale_reason")) for n in nodes}), "price": price}
    out["problems"] = [f"{host}: device {d['label']} is {-100 * d['vs_median']:.1f}% below the node's median "
                       f"({d['value']:.4g} against {d['median']:.4g} TFLOP/s)"
                       for host, f in figures.items() for d in f["devices"] if d["flagged"]]
    out["problems"] += [f"node {d['label']}: {name} {d['value']:.4g} is {-100 * d['vs_median']:.1f}% below the "
                        "nodes' median" for name, items in out["node_comparison"].items() for d in items
                        if d["flagged"]]
    out["headlines"] = headlines(out)
    return out


def _pct(x: Any) -> str:
    return "not measured" if x is None else f"{100 * x:.1f}%"


ABOVE = "FLAGGED: above 100% of a peak it cannot pass, so that peak is no ceiling for this figure"


def _above(x: Any) -> str:
    """' [FLAGGED: ...]' after a share of a ceiling (the datasheet peak, the achievable peak, the link) above 100%:
    the ceiling was measured or estimated for something else (a mamf sweep at other sizes, a CPU's estimate), so
    the share is not a plain percentage to be read."""
    return f" [{ABOVE}]" if x is not None and x > 1 else ""


def _share(x: Any) -> str:
    return _pct(x) + _above(x)


def _num(x: Any, unit: str = "") -> str:
    return "not measured" if x is None else f"{x:.4g}{unit}"


def _method(achievable: dict[str, Any]) -> str:
    """How the achievable peak was measured (manifest `achievable.method`; bundles before it: not stated)."""
    method = achievable.get("method")
    return {"flushed": "cache flushed before each call, as mamf-finder", "warm": "warm calls"}.get(
        method, f"method {method or 'not stated'}")


def _matmul_line(m: dict[str, Any] | None) -> str:
    if not m:
        return "matmul: not measured"
    best, mamf = m["best"], m["achievable"]
    ach = (f", {_pct(best['of_achievable'])} of the achievable {mamf['tflops']:.4g} (mamf, {mamf['case_id']}, "
           f"{_method(mamf)}){_above(best['of_achievable'])}" if mamf else ", achievable not measured (no mamf sweep)")
    return (f"matmul {m['dtype']}: best {best['tflops']:.4g} TFLOP/s ({best['backend']}, {best['case_id']}) = "
            f"{_pct(best['of_datasheet'])} of the datasheet {_num(m['datasheet_tflops'])}"
            f"{_above(best['of_datasheet'])}{ach}{_flags(best)}")


def _flags(figure: dict[str, Any]) -> str:
    """' [contended, CI missed]' after a headline figure whose row is flagged (harness/results/analysis/flags.py)."""
    return f" [{figure['flags']}]" if figure.get("flags") else ""


def _node_lines(host: str, f: dict[str, Any], price: float | None) -> list[str]:
    lines = [f"{host}: {_matmul_line(f['matmul'])}"]
    if f["devices"]:
        d = f["devices"][0]
        mark = " FLAGGED" if d["flagged"] else ""
        lines.append(f"{host}: slowest device {d['label']} {d['value']:.4g} TFLOP/s, {_pct(d['vs_median'])} vs the "
                     f"median of {len(f['devices'])}{mark}{_flags(d)}")
    return [*lines, _throttling_line(host, f["throttling"]), *(_training_line(host, t, price) for t in f["training"])]


def _throttling_line(host: str, t: dict[str, Any]) -> str:
    if not t["readable"]:
        return f"{host}: throttling not measured ({t['why_not']})"
    seen = ", ".join(f"{k} {_pct(v['fraction'])} of readings ({v['case_id']})" for k, v in t["reasons"].items())
    return f"{host}: throttling: " + (seen or f"none in {t['readings']} readings")


def _training_line(host: str, tr: dict[str, Any], price: float | None) -> str:
    cost = (f"; USD {_num(tr.get('usd_per_million_tokens'))} per million tokens, USD "
            f"{_num(tr.get('usd_per_realized_pflop_hour'))} per realized PFLOP-hour at USD {price:g}/device-hour"
            if price else "")
    energy = (f"; {_num(tr.get('j_per_token'))} J/token, {_num(tr.get('tokens_per_s_per_w'))} tokens/s/W "
              f"(device, {tr.get('energy_source')})" if tr.get("j_per_token") is not None else
              f"; energy {tr.get('energy_source')} ({tr.get('energy_reason')})")
    if tr.get("price_kwh"):  # the energy line, apart from the device-hour line (harness/results/analysis/cost.py)
        usd, at = tr.get("usd_energy_per_million_tokens"), f"USD {tr['price_kwh']:g}/kWh, PUE {tr.get('pue') or '-'}"
        energy += f"; energy USD {usd:.4g} per million tokens at {at}" if usd is not None else \
            f"; no energy cost at {at}"
    return (f"{host}: training {tr['backend']} {tr.get('mfu_words') or 'MFU ' + _share(tr['mfu'])}, "
            f"{_num(tr['tokens_per_s'])} tokens/s "
            f"per device{cost}{energy}{_flags(tr)}")


def _collective(v: dict[str, Any]) -> dict[str, Any] | None:
    """The headline collective: the first all_reduce (the figure clusters are sold on), else the first."""
    reduce = [c for c in v["collectives"] if "/all_reduce/" in c["series"]]
    return (reduce or v["collectives"] or [None])[0]


def headlines(v: dict[str, Any]) -> list[str]:
    lines = [line for host, f in v["nodes"].items() for line in _node_lines(host, f, v["price"])]
    c = _collective(v)
    if c:
        link = (f"{_pct(c['of_link'])} of the {c['link_gbps']:g} GB/s link{_above(c['of_link'])}"
                if c["of_link"] is not None else c["link_note"] or "link bandwidth not known")
        lines.append(f"collectives: peak busbw {c['peak_busbw_gbps']:.4g} GB/s ({c['series']}, {c['ranks']} ranks), "
                     f"{link}")
    if not v["price"]:
        lines.append("cost: no price given (price=USD_PER_DEVICE_HOUR)")
    return lines


def _table(header: list[str], rows: list[list[Any]], flagged: list[bool] | None = None) -> str:
    if not rows:
        return "<p>not measured</p>"
    return html_table(header, rows, ["bad" if flag else None for flag in flagged] if flagged else None)


def _node_html(node: Node, f: dict[str, Any], price: float | None) -> str:
    m = f["matmul"] or {}
    out = [f"<h3>{escape(node.host)}</h3>",
           "<h4>Matmul: achieved against the datasheet and the achievable peak</h4>",
           _table(["backend", "case", "TFLOP/s", f"of datasheet ({_num(m.get('datasheet_tflops'))})",
                   f"of achievable ({_num((m.get('achievable') or {}).get('tflops'))}, mamf, "
                   f"{_method(m.get('achievable') or {})})", "flags"],
                  [[b["backend"], b["case_id"], _num(b["tflops"]), _share(b["of_datasheet"]),
                    _share(b["of_achievable"]), b.get("flags", "")]
                   for b in m.get("backends", [])]),
           "<h4>Memory-bound rows (decode, small matmuls, membw): judged on bandwidth against the memory roof</h4>",
           _table(["workload", "backend", "case", "GB/s", "memory roof (GB/s)", "of the roof", "flags"],
                  [[b["workload"], b["backend"], b["case_id"], _num(b["bandwidth_gbps"]),
                    _num(b["peak_membw_gbps"]), _share(b["of_memory_roof"]), b.get("flags", "")]
                   for b in f.get("memory_bound", [])]),
           "<h4>Per-device outliers (the same matmul on each device)</h4>",
           _table(["device", "identity", "TFLOP/s", "vs node median", "flagged (> threshold below)", "flags"],
                  [[d["label"], d["identity"], _num(d["value"]), _pct(d["vs_median"]), "yes" if d["flagged"] else "",
                    d.get("flags", "")] for d in f["devices"]], [d["flagged"] for d in f["devices"]]),
           "<h4>Attention (fastest backend per mode)</h4>",
           _table(["mode", "backend", "case", "TFLOP/s", "MFU", "flags"],
                  [[a["mode"], a["backend"], a["case_id"], _num(a["tflops"]), _share(a["mfu"]), a.get("flags", "")]
                   for a in f["attention"]]),
           f"<h4>Training step and cost{f' at USD {price:g} per device-hour' if price else ' (no price given)'}</h4>",
           _table(["backend", "case", "MFU", "tokens/s per device", "USD per million tokens",
                   "USD per realized PFLOP-hour", "J/token (energy)", "USD energy per million tokens", "flags"],
                  [[t["backend"], t["case_id"], t.get("mfu_words") or _share(t["mfu"]), _num(t["tokens_per_s"]),
                    _num(t.get("usd_per_million_tokens")), _num(t.get("usd_per_realized_pflop_hour")),
                    f"{_num(t.get('j_per_token'))} ({t.get('energy_source')})",
                    _num(t.get("usd_energy_per_million_tokens")), t.get("flags", "")] for t in f["training"]]),
           "<h4>Sustained phase</h4>",
           _table(["backend", "case", "first window TFLOP/s", "steady TFLOP/s", "first vs steady time",
                   "steady after (s)", "clock first / steady (MHz)", "flags"],
                  [[s["backend"], s["case_id"], _num(s["first_tflops"]), _num(s["steady_tflops"]),
                    _pct(s["first_vs_steady"]), _num(s["reached_after_s"]),
                    f"{_num(s['first_clock_mhz'])} / {_num(s['steady_clock_mhz'])}", s.get("flags", "")]
                   for s in f["sustained"]]),
           "<h4>Doctor's findings</h4>", _list((node.record.get("doctor") or {}).get("problems")
                                               if node.record.get("doctor") else ["doctor not run"]),
           "<h4>Parts</h4>",
           _table(["part", "kind", "what", "exit", "seconds", "bundles", "note"],
                  [[p["name"], p["kind"], p["what"], p["exit_code"], f"{p['seconds']:.1f}", " ".join(p["bundles"]),
                    p["note"]] for p in node.record.get("parts") or []],
                  [p["exit_code"] not in (0, None) for p in node.record.get("parts") or []])]
    return "".join(out)


def _list(items: Any) -> str:
    return "<ul>" + "".join(f"<li>{escape(str(i))}</li>" for i in items) + "</ul>" if items else "<p>none</p>"


def _comparison_html(v: dict[str, Any]) -> str:
    if not v["node_comparison"]:
        return ""
    rows, flags = [], []
    for host in v["hosts"]:
        cells, bad = [host], False
        for items in v["node_comparison"].values():
            d = next((x for x in items if x["label"] == host), None)
            cells.append("not measured" if d is None else f"{d['value']:.4g} ({_pct(d['vs_median'])} vs median)"
                         + (" FLAGGED" if d["flagged"] else ""))
            bad = bad or bool(d and d["flagged"])
        rows.append(cells)
        flags.append(bad)
    return "<h3>Nodes compared</h3>" + _table(["node", *v["node_comparison"]], rows, flags)


MAX_BARS = 60
BAR_COLORS = {"datasheet peak": "#9e9e9e", "achievable (mamf)": figures.COLORS[3]}


@figures.styled
def _matmul_figure(found: dict[str, dict[str, Any]]) -> Any:
    """Per node: the datasheet peak, the achievable (mamf) figure and each backend's best, side by side."""
    bars = []
    for host, f in found.items():
        m = f.get("matmul")
        if not m:
            continue
        prefix = f"{host}: " if len(found) > 1 else ""
        named = [("datasheet peak", m["datasheet_tflops"]),
                 ("achievable (mamf)", (m["achievable"] or {}).get("tflops")),
                 *((b["backend"], b["tflops"]) for b in m["backends"])]
        bars += [(prefix + name, value, BAR_COLORS.get(name, figures.COLORS[0])) for name, value in named if value]
    if not bars:
        return None
    bars, cut = figures.shown(bars, MAX_BARS, "bars")
    fig, (ax,) = figures.figure(1.0 + 0.26 * len(bars))
    y = list(range(len(bars)))[::-1]
    drawn = ax.barh(y, [b[1] for b in bars], color=[b[2] for b in bars], height=0.7)
    ax.bar_label(drawn, labels=[f"{b[1]:.4g}" for b in bars], padding=4, fontsize=7)
    ax.set_yticks(y, [figures.label(b[0], 60) for b in bars])
    ax.set_xlabel("TFLOP/s (matmul: each backend's best case)")
    dtypes = sorted({f["matmul"]["dtype"] for f in found.values() if f.get("matmul")})
    figures.title(fig, "Matmul: datasheet peak, achievable (mamf) and achieved", f"dtype {', '.join(dtypes)}")
    figures.note(ax, cut)
    return fig


def verdict_html(nodes: list[Node], v: dict[str, Any]) -> str:
    smoke = any("smoke" in s for s in v["scale"])
    scale = "".join(f'<p class="{"note" if smoke else ""}">{escape(s)}</p>' for s in v["scale"])
    collectives = _table(["series", "ranks", "peak busbw GB/s", "at bytes", "link GB/s", "of link"],
                         [[c["series"], c["ranks"], _num(c["peak_busbw_gbps"]), c["peak_at_bytes"],
                           _num(c["link_gbps"]), _share(c["of_link"]) if c["of_link"] is not None else c["link_note"]]
                          for c in v["collectives"]])
    fig = _matmul_figure(v["nodes"])
    plot = figures.svg(fig, "verdict-matmul") if fig is not None else ""
    return (f"{scale}{_first_screen(v)}{plot}{_comparison_html(v)}<h3>Collectives against the link</h3>{collectives}"
            + "".join(_node_html(n, v["nodes"][n.host], v["price"]) for n in nodes))


HEADLINE_HEAD = ["node", "figure", "value", "unit", "against", "ratio", "ratio 95% CI", "band or flags", "source"]


def _against_ceilings(v: dict[str, Any]) -> list[tuple[list[Any], bool]]:
    """Each headline figure against the ceiling it is measured under, with whether it is flagged: the best matmul
    against the datasheet and the achievable peak, each training step's MFU, the slowest device against its
    node's median, the collective against its link."""
    out = []
    for host, f in v["nodes"].items():
        m = f["matmul"]
        if m:
            b, a = m["best"], m["achievable"]
            name = f"best matmul {m['dtype']} ({b['backend']}, {b['case_id']})"
            out.append(([host, name, _num(b["tflops"]), "TFLOP/s", f"datasheet {_num(m['datasheet_tflops'])}",
                         _share(b["of_datasheet"]), "", b.get("flags", ""), m.get("peak_source") or ""],
                        bool(_above(b["of_datasheet"]))))
            if a:
                out.append(([host, name, _num(b["tflops"]), "TFLOP/s", f"achievable {a['tflops']:.4g} (mamf)",
                             _share(b["of_achievable"]), "", b.get("flags", ""), f"{a['case_id']}, {_method(a)}"],
                            bool(_above(b["of_achievable"]))))
        for d in f["devices"][:1]:
            out.append(([host, f"slowest device {d['label']}", _num(d["value"]), "TFLOP/s",
                         f"median of {len(f['devices'])} devices {_num(d['median'])}", f"{_pct(d['vs_median'])} vs it",
                         "", ("FLAGGED " if d["flagged"] else "") + d.get("flags", ""), ""], d["flagged"]))
        out += [([host, f"training {t['backend']} ({t['case_id']})", _num(t["tokens_per_s"]), "tokens/s per device",
                  label, _share(mfu), "", t.get("flags", ""), ""], bool(_above(mfu)))
                for t in f["training"] for label, mfu in t.get("mfu_by_denominator") or [("datasheet peak (MFU)",
                                                                                          t["mfu"])]]
    c = _collective(v)
    if c:
        link = f"link {c['link_gbps']:g} GB/s" if c["link_gbps"] else c["link_note"] or "link bandwidth not known"
        out.append((["suite", f"collective {c['series']} ({c['ranks']} ranks)", _num(c["peak_busbw_gbps"]),
                     "GB/s busbw", link, _share(c["of_link"]) if c["of_link"] is not None else "", "", "", ""],
                    bool(_above(c["of_link"]))))
    return out


def flagged(v: dict[str, Any]) -> list[str]:
    """The headline figures above 100% of their ceiling, as findings to read (not failures of the hardware)."""
    return [f"{cells[0]}: {cells[1]} {cells[2]} {cells[3]} is {str(cells[5]).split(' [')[0]} of the {cells[4]}: "
            f"{ABOVE}" for cells, bad in _against_ceilings(v) if bad and ABOVE in str(cells[5])]


def _first_screen(v: dict[str, Any]) -> str:
    """One table of the headline figures with their bands (the figures with no public reference said once per
    reason, naming them), the findings, then the notes (throttling, cost)."""
    refs = v.get("references") or []
    rows = _against_ceilings(v) + [(yardsticks.cells(y), y.band == yardsticks.FAR_BELOW)
                                   for y in refs if y.reference is not None]
    table = _table(HEADLINE_HEAD, [r for r, _ in rows], [bad for _, bad in rows])
    none = yardsticks.unreferenced_html(refs)
    found = [*v["problems"], *flagged(v)]
    notes = [_throttling_line(host, f["throttling"]) for host, f in v["nodes"].items()]
    notes += [_training_line(h, t, v["price"]) for h, f in v["nodes"].items() for t in f["training"]]
    notes += [] if v["price"] else ["cost: no price given (price=USD_PER_DEVICE_HOUR)"]
    return (f"<h3>Headline figures</h3>{table}" + (f"<p>No public reference:</p>{none}" if none else "")
            + "<h3>Findings</h3>" + (_list(found).replace("<li>", '<li class="bad">') if found else "<p>none</p>")
            + f"<h3>Notes</h3>{_list(notes)}")


def build(root: Path, price: float | None, threshold: float = verdict.OUTLIER_THRESHOLD,
          problems: Sequence[str] = (), unreliable: Sequence[str] = (),
          bands: Bands | None = None, energy: Any = None) -> tuple[str, dict[str, Any]]:
    """(the report's HTML, the verdict's figures) of the suite folder `root`. `problems` and `unreliable`: what the
    suite found beside the folder (parts that exited non-zero, missing ranks, `history check`'s regressions and
    discounted changes); with the folder's own problems and every row's flags they make the verdict's first line
    (harness/suites/judgement.py), `v["judgement"]`. Each headline figure is set against its public reference
    (harness/suites/yardsticks.py, `bands`: the reference table's unless given); one far below is a problem."""
    nodes, found = load(root)
    v = figures_of(nodes, price, threshold, energy)  # energy: cost.EnergyPrice (price_kwh=, pue=) or None
    v["references"] = yardsticks.of_verdict(v, bands or default_bands())
    v["headlines"] += [f"reference: {line}" for line in yardsticks.headlines(v["references"])]
    v["problems"] = found + v["problems"] + yardsticks.problems(v["references"])
    bundles = list({b.folder: b for n in nodes for _, bs in n.parts.values() for b in bs}.values())
    judged = judgement.judge([r for b in bundles for r in b.rows], [*problems, *v["problems"]], unreliable)
    v["judgement"] = judged.as_dict()
    envs = [b.environment() for b in bundles]
    telemetry = {b.manifest["run_id"]: b.telemetry() for b in bundles}
    title = f"xmfu suite {root.name}"
    html = report.build(bundles, envs, telemetry, lead=[("Verdict", verdict_html(nodes, v))], title=title,
                        first=judgement_html(judged))
    return html, v


def judgement_html(judged: judgement.Judgement) -> str:
    """The page's first line: the verdict in bold, then its reasons and caveats (escaped)."""
    rest = judged.line().removeprefix(judged.verdict)
    return f'<p class="judgement"><b>{escape(judged.verdict)}</b>{escape(rest)}</p>'
