"""Each headline figure against its public reference (harness/machine/references.py): the matching reference,
the ratio with its CI, the band and the source, or "no public reference" with why.

The headline figures are the verdict's (harness/suites/verdict.py): per node, the achievable (mamf) matmul,
each backend's training step (tokens/s and J/token), the fastest attention per mode and at each published attention
shape, the least J/token of each inference phase, batch and length; the suite's collectives.
A figure far below its reference is a finding: the acceptance suite fails on it (`problems`). Used by
the verdict page, `xmfu report` and `xmfu compare --references`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from html import escape
from typing import Any

from xmfu.harness.machine import references
from xmfu.harness.machine.references import FAR_BELOW, Bands
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.render.html_table import html_table
from xmfu.harness.suites import verdict

COLUMNS = ("node", "figure", "value", "unit", "reference", "ratio", "ratio_ci95", "band", "source")


@dataclass(frozen=True)
class Yardstick:
    """One headline figure against its public reference, or with why it has none (`reference` None)."""

    node: str
    figure: str
    value: float | None
    unit: str
    device_id: str | None
    conditions: dict[str, Any]
    reference_id: str | None = None
    reference: float | None = None
    reference_unit: str | None = None  # the reference's unit; only with a reference
    ratio: float | None = None
    ratio_ci95: list[float] | None = None
    band: str = references.NO_REFERENCE
    source: str = references.NO_REFERENCE
    context: str = ""

    def as_dict(self) -> dict[str, Any]:
        """Its fields in order, as `compare --references --format json` and suite.json print them: a figure without
        a reference has no reference_unit."""
        out = asdict(self)
        if self.reference_id is None:
            del out["reference_unit"]
        return out


def _one(node: str, label: str, kind: str, value: float | None, unit: str, ci: Any, device: str | None,
         conditions: Mapping[str, Any], bands: Bands, convention: str | None = None) -> Yardstick:
    """`convention`: the figure's FLOP convention, where the reference's value depends on it (attention)."""
    figure = Yardstick(node, label, value, unit, device, dict(conditions))
    entry, why = references.find(kind, device, conditions)
    ref = None if entry is None else references.value_under(entry, convention)
    if entry is not None and ref is None:
        why = f"{references.NO_REFERENCE} under the FLOP convention {convention!r} ({entry['id']} gives none)"
    if ref is None or value is None:
        return replace(figure, source=why or references.NO_REFERENCE)
    return replace(figure, **references.judge(value, ci, entry, bands, ref))


def _attention(node: str, label: str, a: Mapping[str, Any], bands: Bands) -> Yardstick:
    return _one(node, label, "attention", a["tflops"], "TFLOP/s", a.get("tflops_ci95"), a.get("device_id"),
                a.get("conditions") or {}, bands, a.get("flop_convention"))


def _shape_text(c: Mapping[str, Any]) -> str:
    return (f"{c['dtype']} b{c['batch']} h{c['heads']}/kv{c['kv_heads']} s{c['seq_len']} d{c['head_dim']} "
            f"{'causal' if c['causal'] else 'no mask'}")


def of_attention(node: str, f: Mapping[str, Any], bands: Bands) -> list[Yardstick]:
    """Each mode's fastest attention figure against the reference at its own shape, if one is published; then,
    for every public attention reference on the node's devices, the fastest backend at exactly its shape, mode,
    dtype and mask where the node timed it (one row per reference; a headline already at that shape is not
    repeated)."""
    heads = f.get("attention") or []
    out = [_attention(node, f"attention {a['mode']} ({a['backend']}, {a['case_id']})", a, bands) for a in heads]
    shapes = f.get("attention_shapes") or []
    keys = references.MATCHED_ON["attention"]
    for e in references.entries():
        if e["figure"] != "attention":
            continue
        at = [a for a in shapes if a.get("device_id") == e["device"]
              and all(str(a["conditions"].get(k)) == str(e["conditions"][k]) for k in keys)]
        best = max(at, key=lambda a: a["tflops"], default=None)
        if best is None or any((h["case_id"], h["backend"]) == (best["case_id"], best["backend"]) for h in heads):
            continue
        label = f"attention {best['mode']} at {_shape_text(best['conditions'])} ({best['backend']})"
        out.append(_attention(node, label, best, bands))
    return out


def _unpublished(node: str, label: str, value: float | None, unit: str, what: str) -> Yardstick:
    """A headline figure of a kind the table holds no reference for yet."""
    return Yardstick(node, label, value, unit, None, {}, source=f"{references.NO_REFERENCE} {what}")


def of_node(node: str, f: Mapping[str, Any], nodes: int | None, bands: Bands) -> list[Yardstick]:
    """The headline figures of one node's verdict figures (verdict.node) against their references."""
    out = []
    m = f.get("matmul") or {}
    if m.get("best"):
        out.append(_unpublished(node, f"best matmul {m['dtype']} ({m['best']['backend']}, {m['best']['case_id']})",
                                m["best"]["tflops"], "TFLOP/s", "for a matmul at one shape"))
    out += of_attention(node, f, bands)
    if m.get("achievable"):
        a = m["achievable"]
        sweep = f"{a['backend']} log" if str(a.get("source", "")).endswith("(imported)") else "mamf"
        out.append(_one(node, f"achievable matmul {a.get('dtype')} ({sweep})", "matmul_achievable", a["tflops"],
                        "TFLOP/s", m.get("achievable_ci95"), m.get("device_id"),
                        {"dtype": a.get("dtype"), "world_size": 1}, bands))
    for t in f.get("training") or []:
        cond = {"model": t.get("model"), "seq_len": t.get("seq_len"), "dtype": t.get("dtype"),
                "world_size": t.get("world_size"), "nodes": _nodes(t, nodes)}
        out.append(_one(node, f"training {t['backend']} {t['case_id']} tokens/s per device", "training_tokens",
                        t.get("tokens_per_s"), "tokens/s per device", t.get("tokens_per_s_ci95"),
                        t.get("device_id"), cond, bands))
        energy = {"model": t.get("model"), "phase": "training", "batch": t.get("batch"), "dtype": t.get("dtype"),
                  "world_size": t.get("world_size")}
        out.append(_energy(node, f"training {t['backend']} {t['case_id']} J/token", t.get("j_per_token"), None,
                           t.get("device_id"), energy, t.get("energy_reason"), bands))
    for e in f.get("inference_energy") or []:
        c = e["conditions"]
        label = f"inference {c['phase']} b{c['batch']} {e['lengths']} J/token ({e['backend']}, {e['case_id']})"
        out.append(_energy(node, label, e["j_per_token"], e["j_per_token_ci95"], e["device_id"], c,
                           e["energy_reason"], bands))
    return out


def _energy(node: str, label: str, value: float | None, ci: Any, device: str | None, conditions: Mapping[str, Any],
            why_not: str | None, bands: Bands) -> Yardstick:
    """A J/token figure against a public J/token reference (less is better: references.LOWER_IS_BETTER), or, where
    the row measured no energy, the figure as not measured with the row's reason."""
    if value is None:
        return Yardstick(node, label, None, "J/token", device, dict(conditions),
                         source=f"{NOT_MEASURED}: {why_not or 'no energy recorded'}")
    return _one(node, label, "energy_per_token", value, "J/token", ci, device, conditions, bands)


def of_collectives(items: Sequence[Mapping[str, Any]], nodes: int | None, bands: Bands,
                   node: str = "suite") -> list[Yardstick]:
    return [_one(node, f"collective {c['series']} peak busbw ({c['ranks']} ranks)", "collective_busbw",
                 c["peak_busbw_gbps"], "GB/s busbw", None, c.get("device_id"),
                 {"op": c.get("op"), "ranks": c.get("ranks"), "nodes": _nodes(c, nodes)}, bands) for c in items]


def _nodes(figure: Mapping[str, Any], suite_nodes: int | None) -> int | None:
    """The nodes a figure's run spanned: its own count (the hosts its ranks exchanged, which its bundle records:
    harness/results/bundle/nodes.py), else one device's is one node, else the suite's reporting hosts (None for loose
    bundles: not recorded, so no reference matched on nodes is used)."""
    if figure.get("nodes") is not None:
        return figure["nodes"]
    return 1 if (figure.get("world_size") or figure.get("ranks") or 1) == 1 else suite_nodes


def of_verdict(v: Mapping[str, Any], bands: Bands) -> list[Yardstick]:
    """Every headline figure of a suite's verdict figures (suite_report.figures_of): the node count is the
    number of nodes that reported."""
    nodes = len(v["hosts"]) or None
    return ([row for host, f in v["nodes"].items() for row in of_node(host, f, nodes, bands)]
            + of_collectives(v["collectives"], nodes, bands))


def of_bundles(bundles: Sequence[Bundle], bands: Bands) -> list[Yardstick]:
    """The headline figures of loose bundles (`xmfu report`, `xmfu compare --references`): xmfu's own as one node
    ("bundles": each figure the best over them), each imported log as its own (its run id: logs come from any
    machine), and a line for each bundle that gives no figure. A multi-device figure's node count is its bundle's
    own (manifest process.nodes, the hosts its ranks exchanged; an imported log: its rank map); where a bundle does
    not record it (a JAX multi-process run, an older bundle), the figure finds no reference matched on nodes."""
    own = [b for b in bundles if not _imported(b)]
    out = _figures("bundles", own, "suite", bands) if own else []
    for b in bundles:
        if _imported(b):
            out += _figures(_name(b), [b], _name(b), bands)
    return out + [y for b in bundles if (y := _unfigured(b)) is not None]


def _imported(bundle: Bundle) -> bool:
    return any(r.imported is not None for r in bundle.rows)


def _name(bundle: Bundle) -> str:
    return str(bundle.manifest.get("run_id") or bundle.folder.name)


def _figures(node: str, bundles: Sequence[Bundle], collective_node: str, bands: Bands) -> list[Yardstick]:
    """One node's headline figures from `bundles`; a sweep without main-phase matmul rows (an imported mamf-finder
    log) still gives its achievable figure."""
    f = verdict.node({"bundles": ("run", list(bundles))}, None)
    if f["matmul"] is None and (mamf := verdict.achievable(bundles)) is not None:
        f["matmul"] = {"dtype": mamf.get("dtype"), "achievable": mamf, "best": None,
                       "device_id": mamf.get("device_id"), "achievable_ci95": None}
    return of_node(node, f, None, bands) + of_collectives(verdict.collectives(bundles), None, bands, collective_node)


HEADLINE_WORKLOADS = ("matmul", "attention", "transformer", "inference", "collectives")  # what of_node's figures read
NOT_MEASURED = "not measured"


def _unfigured(bundle: Bundle) -> Yardstick | None:
    """A bundle none of whose rows can give a headline figure, said as one (no bundle passes in silence, issue 42
    item 3): its workloads have no headline figure, or none of its rows was validly timed. None for the others."""
    workloads = ", ".join(sorted({r.workload for r in bundle.rows})) or "no rows"
    node, label = (_name(bundle), workloads) if _imported(bundle) else ("bundles", f"{workloads} ({_name(bundle)})")
    if not {r.workload for r in bundle.rows} & set(HEADLINE_WORKLOADS):
        return _unpublished(node, label, None, "", f"for {workloads}: headline figures are of the kinds "
                                                   f"{', '.join(references.FIGURES)}")
    if any(verdict.timed(r) or r.busbw_gbps is not None for r in bundle.rows):
        return None
    reasons = sorted({r.reason for r in bundle.rows if r.reason})
    why = f" ({reasons[0]}{f'; and {len(reasons) - 1} more' if len(reasons) > 1 else ''})" if reasons else ""
    return Yardstick(node, label, None, "", None, {},
                     source=f"{references.NO_REFERENCE}: {NOT_MEASURED}, no row was validly timed{why}")


def problems(figures: Sequence[Yardstick]) -> list[str]:
    """A figure far below its reference: a finding of the acceptance suite."""
    return [f"{y.node}: {y.figure} {y.value:.4g} is {ratio_text(y)} of the public reference "
            f"{y.reference:g} {y.reference_unit} ({y.reference_id}): far below (source {y.source})"
            for y in figures if y.band == FAR_BELOW]


def ratio_text(y: Yardstick) -> str:
    if y.ratio is None:
        return "not compared"
    ci = y.ratio_ci95
    return f"{100 * y.ratio:.1f}%" + (f" (95% CI {100 * ci[0]:.1f}-{100 * ci[1]:.1f}%)" if ci else "")


def headline(y: Yardstick) -> str:
    if y.reference is None:
        return f"{y.node}: {y.figure}: {y.source}"
    return (f"{y.node}: {y.figure} {y.value:.4g} = {ratio_text(y)} of the public reference "
            f"{y.reference:g} ({y.reference_id}): {y.band}; source {y.source}")


def unreferenced(figures: Sequence[Yardstick]) -> list[tuple[str, list[Yardstick]]]:
    """The figures with no public reference, grouped by why (in the order first met): on a device the table does not
    hold, every figure shares one reason, and a reason said once for all of them reads better than said for each."""
    by: dict[str, list[Yardstick]] = {}
    for y in figures:
        if y.reference is None:
            by.setdefault(y.source, []).append(y)
    return list(by.items())


def _named(figures: Sequence[Yardstick]) -> str:
    return "; ".join(f"{y.node}: {y.figure}" for y in figures)


def headlines(figures: Sequence[Yardstick]) -> list[str]:
    """A line per figure compared with a reference, then one line per reason a figure has none, naming them."""
    groups = [f"{why}: {len(ys)} figures: {_named(ys)}" if len(ys) > 1 else headline(ys[0])
              for why, ys in unreferenced(figures)]
    return [headline(y) for y in figures if y.reference is not None] + groups


def unreferenced_html(figures: Sequence[Yardstick]) -> str:
    """The figures with no public reference, one line per reason naming the figures (escaped)."""
    lines = "".join(f"<li>{escape(why)}: {len(ys)} figure{'s' if len(ys) > 1 else ''}: "
                    f"<small>{escape(_named(ys))}</small></li>" for why, ys in unreferenced(figures))
    return f"<ul>{lines}</ul>" if lines else ""


def cells(y: Yardstick) -> list[str]:
    # no value: not measured, or a bundle whose workload has no headline figure at all (no unit: "-")
    value = f"{y.value:.4g}" if y.value is not None else "-" if not y.unit and NOT_MEASURED not in y.source \
        else NOT_MEASURED
    ref = "" if y.reference is None else f"{y.reference:g} ({y.reference_id})"
    ci = y.ratio_ci95
    return [y.node, y.figure, value, y.unit, ref, "" if y.ratio is None else f"{100 * y.ratio:.1f}%",
            f"{100 * ci[0]:.1f}-{100 * ci[1]:.1f}%" if ci else "", y.band, y.source]


def render(figures: Sequence[Yardstick], fmt: str) -> str:
    """`xmfu compare --references`: table | csv | json | markdown."""
    if fmt == "json":
        return json.dumps([y.as_dict() for y in figures], indent=2, default=str)
    table = [cells(y) for y in figures]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerows([list(COLUMNS), *table])
        return buf.getvalue().rstrip("\n")
    if fmt == "markdown":
        esc = [[c.replace("|", "\\|") for c in row] for row in table]
        return "\n".join(["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS),
                          *("| " + " | ".join(row) + " |" for row in esc)])
    widths = [max(len(str(x)) for x in col) for col in zip(COLUMNS, *table, strict=False)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
                     for row in [list(COLUMNS), *table])


def html(figures: Sequence[Yardstick]) -> str:
    """Each headline figure against its public reference, as an HTML table (escaped by html_table); a row far below
    is marked. Empty without figures."""
    if not figures:
        return ""
    return "<h3>Against public references</h3>" + html_table(
        ["node", "figure", "value", "unit", "reference", "ratio", "ratio 95% CI", "band", "source"],
        [cells(y) for y in figures], ["bad" if y.band == FAR_BELOW else None for y in figures])
