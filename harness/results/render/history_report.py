"""`xmfu history report --store PATH -o page.html`: one self-contained page of a history store.

Every series over time with the changes beyond the noise marked where they began (judge.steps, by
`history check`'s rule), the gap between two platforms, the software changes between consecutive runs of
each platform and device (driver, CUDA, HIP, NCCL/RCCL, torch, JAX, Triton, xmfu) listed and drawn where
they happened, so a step in a series or in the gap sits next to the upgrade that caused it; and what runs
on day one over time (harness/results/history/coverage_history.py). Inline SVG, no script, everything escaped.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape
from typing import Any

from xmfu.harness.results.analysis import coverage
from xmfu.harness.results.history import changes as what_changed
from xmfu.harness.results.history import coverage_history, judge, parquet, power, trend
from xmfu.harness.results.history.stored import Stored
from xmfu.harness.results.plots import figures
from xmfu.harness.results.render.html_table import html_table, with_contents
from xmfu.harness.results.render.report import STYLE

METRICS = ("tflops", "busbw_gbps")  # the figures a nightly tracks; MFU and tokens/s follow TFLOP/s
MAX_CHANGE_LABELS = 40  # vertical lines per plot; the table lists every change


@dataclass(frozen=True)
class Change:
    label: str  # S1, S2... as drawn in the plots
    at: datetime
    platform: str
    device: str
    run_id: str
    what: tuple[tuple[str, str, str], ...]  # (software, before, after)

    def text(self) -> str:
        return ", ".join(f"{name} {old} → {new}" for name, old, new in self.what)


def software_changes(rows: Sequence[Stored]) -> list[Change]:
    """Per platform and device, what changed in the software between one run and the next (in time order). A
    version unknown on either side (an older store, a CPU without NCCL) is not a change."""
    runs: dict[tuple[str, str], dict[str, Stored]] = defaultdict(dict)
    for r in rows:
        runs[(r.platform, r.device)].setdefault(r.run_id, r)
    found = []
    for (platform, device), by_run in runs.items():
        ordered = sorted(by_run.values(), key=lambda r: (r.created, r.run_id))
        for before, after in itertools.pairwise(ordered):
            if what := _software_changed(before, after):
                found.append((after.created, platform, device, after.run_id, what))
    found.sort(key=lambda c: (c[0], c[1], c[2]))
    return [Change(f"S{i + 1}", *c) for i, c in enumerate(found)]


def _software_changed(before: Stored, after: Stored) -> tuple[tuple[str, str, str], ...]:
    """(software, before, after) for each version that both runs know and that differs."""
    versions = [(name, getattr(before, name), getattr(after, name)) for name in parquet.SOFTWARE]
    return tuple((name, str(old), str(new)) for name, old, new in versions if old and new and old != new)


def _marks(steps: Sequence[dict[str, Any]]) -> dict[str, list[trend.Mark]]:
    out: dict[str, list[trend.Mark]] = defaultdict(list)
    for s in steps:
        out[s["workload"]].append((s["at"], s["latest"], s["worse"]))
    return out


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], css: Sequence[str] = ()) -> str:
    return html_table(header, rows, css) if rows else "<p>none</p>"


def _steps_html(steps: Sequence[dict[str, Any]], changes: Sequence[Change]) -> str:
    rows, css = [], []
    for s in sorted(steps, key=lambda s: s["at"]):
        # the upgrades between this point and the one before it, on the same device: the likely cause
        near = [c.label for c in changes if c.device == s["device"] and s["previous_at"] < c.at <= s["at"]]
        rows.append([s["at"].isoformat(timespec="minutes"), s["metric"], s["workload"], s["case_id"], s["backend"],
                     s["device"], f"{s['latest']:.4g}", f"{s['baseline']:.4g}", f"{100 * s['change']:+.1f}%",
                     "regression" if s["worse"] else "improvement", " ".join(near)])
        css.append("bad" if s["worse"] else "")
    return _table(["when", "metric", "workload", "case", "backend", "device", "value", "baseline (median before)",
                   "change", "kind", "software changed since the point before"], rows, css)


def _series_section(rows: Sequence[Stored], metric: str, changes: Sequence[Change], window: int,
                    sigmas: float, min_change: float) -> tuple[str, list[dict[str, Any]]]:
    found = judge.series(rows, metric)
    if not found:
        return "", []
    steps = judge.steps(rows, metric, window, sigmas, min_change)
    groups = trend.series_groups(found)
    lines = [(c.at, c.label) for c in changes][:MAX_CHANGE_LABELS]
    fig = trend.figure(groups, f"{metric} over time", trend.METRIC_LABELS.get(metric, metric), marks=_marks(steps),
                       changes=lines)
    header, table_rows = trend.series_table(groups)
    return figures.svg(fig, f"series-{metric}") + _table(header, table_rows), steps


def _gap_section(rows: Sequence[Stored], gap: tuple[str, str] | None, changes: Sequence[Change]) -> str:
    if gap is None:
        return "<p>Give two platforms or devices (--gap rocm cuda) to plot the gap between them.</p>"
    points = judge.gap(rows, "tflops", *gap)
    if not points:
        return f"<p>No matching cases of {escape(gap[0])} and {escape(gap[1])} on the same day.</p>"
    mine = [(c.at, c.label) for c in changes if gap[0] in (c.platform, c.device) or gap[1] in (c.platform, c.device)]
    fig = trend.figure(trend.gap_groups(points), f"TFLOP/s: {gap[0]} / {gap[1]} on matching cases, per day",
                       f"TFLOP/s ratio {gap[0]} / {gap[1]}", parity=True, changes=mine[:MAX_CHANGE_LABELS])
    return figures.svg(fig, "gap")


def _list(items: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{escape(i)}</li>" for i in items) + "</ul>" if items else "<p>none</p>"


def _changes_section(rows: Sequence[Stored]) -> str:
    """`xmfu history changes` on the page (results/history/changes.py), one part per platform and device."""
    parts = []
    for c in what_changed.changes(rows):
        moved = _table(["series", "metric", "baseline", "latest", "change", "detectable", "repro", "bundle"],
                       [[m.label, m.metric, f"{m.baseline:.4g}", f"{m.latest:.4g}", f"{100 * m.change:+.1f}%",
                         f"{100 * m.detectable:.1f}%", m.repro, m.bundle] for m in c.moved],
                       ["bad" if m.worse else "" for m in c.moved]) if c.moved else "<p>none</p>"
        parts.append(
            f"<h3>{escape(f'{c.platform} {c.device}: run {c.run.id} since {c.since.id}')}</h3>"
            f"<h4>Toolchain and environment</h4>{_list([f'{w}: {b} -> {a}' for w, b, a in c.toolchain])}"
            f"<h4>Verdicts that flipped</h4>{_list([f'{s} {m}: {b} -> {a}' for s, m, b, a, _ in c.flips])}"
            f"<h4>Series gained or lost</h4>"
            f"{_list([f'lost: {x} ({why})' for x, why in c.lost] + [f'gained: {x} ({how})' for x, how in c.gained])}"
            f"<h4>Metrics moved beyond their detectable change, biggest first</h4>{moved}")
    return "".join(parts) or "<p>Each platform and device in the store has one run: nothing to compare yet.</p>"


def _power_section(rows: Sequence[Stored], window: int, sigmas: float, min_change: float, detect: float) -> str:
    """What each judged series can see (results/history/power.py), the summary line first; the series that cannot
    see `detect` marked."""
    found = [p for metric in METRICS for p in power.powers(rows, metric, window, sigmas, min_change)]
    too_few = sum(len(judge.insufficient(rows, metric)) for metric in METRICS)
    keys = [p.key for p in found]
    table_rows, css = [], []
    for p in found:
        cannot = not p.can_detect(detect)
        table_rows.append([p.metric, judge.series_label(p.key, keys), p.runs, _percent(p.rule_bound),
                           _percent(p.interval_bound), p.text(), "no (noise)" if cannot else "yes"])
        css.append("bad" if cannot else "")
    head = f"<p>{escape(power.summary(found, too_few, detect).line())}.</p>"
    return head + (_table(["metric", "series", "baseline runs", f"{sigmas:g} robust sigmas or {100 * min_change:g}%",
                           "prediction interval", "detectable change for the worse",
                           f"can detect {100 * detect:g}%"], table_rows, css) if found else "")


def _percent(value: float | None) -> str:
    return "not measured" if value is None else f"{100 * value:.1f}%"


def default_gap(rows: Sequence[Stored]) -> tuple[str, str] | None:
    """ROCm against CUDA when the store holds both."""
    platforms = {r.platform for r in rows}
    return ("rocm", "cuda") if {"rocm", "cuda"} <= platforms else None


def _coverage_section(rows: Sequence[Stored], changes: Sequence[Change]) -> str:
    days = coverage_history.by_day(rows)
    fig = coverage_history.figure(coverage_history.shares(days), [(c.at, c.label) for c in changes][:MAX_CHANGE_LABELS])
    now = coverage.coverage(map(coverage_history.entry, coverage_history.latest_rows(rows)))
    return (figures.svg(fig, "coverage-over-time")
            + "<h3>Each cell: when it first ran and when it turned ok</h3>"
            + coverage_history.table_html(coverage_history.cells(days))
            + "<h3>The matrix as it stands (each platform's latest day)</h3>" + coverage.render_html(now))


def build(rows: Sequence[Stored], store: str, gap: tuple[str, str] | None = None, rule: judge.Rule = judge.RULE,
          notes: Sequence[str] = ()) -> str:
    """The page. `gap`: (numerator, denominator) platform or device names; default ROCm / CUDA when present.
    `notes`: what the store's recorded judgements say against `rule` (recorded.notes)."""
    window, sigmas, min_change, detect = rule.window, rule.sigmas, rule.min_change, rule.detect
    gap = gap or default_gap(rows)
    changes = software_changes(rows)
    series_html, steps = [], []
    for metric in METRICS:
        html, found = _series_section(rows, metric, changes, window, sigmas, min_change)
        if html:
            series_html.append(f"<h3>{escape(trend.METRIC_LABELS.get(metric, metric))}</h3>{html}")
            steps += found
    times = sorted(r.created for r in rows)
    runs = len({r.suite_id or r.run_id for r in rows})  # a suite's part bundles are one run of it
    bundles = len({r.run_id for r in rows})
    counted = f"{runs} runs ({bundles} bundles: a suite's parts are one run)" if bundles != runs else f"{runs} runs"
    summary = (f"<p>{counted} from {times[0]:%Y-%m-%d} to {times[-1]:%Y-%m-%d} in {escape(store)}; platforms and "
               f"devices: {escape(', '.join(sorted({r.platform + ' ' + r.device for r in rows})))}. Changes "
               f"beyond the noise: max({sigmas:g} robust sigmas, {100 * min_change:g}%) of the median of the previous "
               f"{window} runs (as `xmfu history check` judges the latest night), each marked where it began. "
               f"The rule: {escape(rule.text())}.</p>" + "".join(f"<p class='note'>{escape(n)}</p>" for n in notes))
    sections = (
        ("What changed since the run before", _changes_section(rows)),
        ("Changes beyond the noise", _steps_html(steps, changes)),
        ("What each series can detect", _power_section(rows, window, sigmas, min_change, detect)),
        ("Software changes between consecutive runs",
         _table(["mark", "when", "platform", "device", "first run with it", "what changed"],
                [[c.label, c.at.isoformat(timespec="minutes"), c.platform, c.device, c.run_id, c.text()]
                 for c in changes])),
        ("The gap between platforms", _gap_section(rows, gap, changes)),
        ("Every series", "".join(series_html) or "<p>No ok, validly timed rows.</p>"),
        ("What runs on day one, over time", _coverage_section(rows, changes)),
    )
    body = with_contents(sections)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>xmfu history</title><style>{STYLE}</style>"
            f"</head><body><h1>xmfu history</h1>{summary}{body}</body></html>")
