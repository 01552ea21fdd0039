"""The table printed at the end of a run (and the one-line progress per row).

By default it fits 120 columns, as nccl-tests' table fits a terminal: per (phase, workload) a header line names
what every row shares (workload, dtype, the peak, the parts of the shape they have in common), the table shows
the columns that vary plus the figures, long notes become numbered footnotes, and a shape or a speedup that
still does not fit wraps at its own separators. `wide=True` (`output.wide=true`, `xmfu table --wide`) shows
every column on one line per row; the bundle's cases.jsonl keeps every field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from xmfu.harness.results.analysis.flags import ACHIEVABLE_FLAGS, flags_of, row_flags
from xmfu.harness.results.render.nccl_table import collectives_table
from xmfu.harness.results.render.text_table import Column, fit, number, paragraph, render
from xmfu.harness.results.schema.parts import Latency
from xmfu.harness.results.schema.row import Row
from xmfu.harness.results.statistics.speedup import reread

WIDTH = 120  # a terminal's width the default table fits (issue 30 item 9)
WIDE_HINT = ("every column: output.wide=true (xmfu run) or xmfu table --wide BUNDLE; every field: the bundle's "
             "cases.jsonl")


def _params(row: Row) -> str:
    """The case id without its workload and dtype prefix (they have their own columns)."""
    return row.case_id.removeprefix(f"{row.workload}-{row.dtype}-")


def _bandwidth(row: Row) -> str:
    if row.algbw_gbps is None:
        return ""
    bus = row.busbw_gbps
    return f"algbw {row.algbw_gbps:.3g} GB/s, busbw " + (f"{bus:.3g} GB/s" if bus is not None else "n/a (1 rank)")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _ci_missed(row: Row) -> bool:
    """Sampling stopped before the median's CI was as narrow as asked (null: not timed, not a miss)."""
    return row.timer is not None and row.timer.ci_target_met is False


def _ci(row: Row) -> str:
    t = row.time_s
    half = (t.ci95_high - t.ci95_low) / 2 / t.median if t is not None and t.median else None
    return _pct(half) + ("!" if _ci_missed(row) else "")


def _note(row: Row) -> str:
    note = row.reason or _bandwidth(row) or row.mfu_reason or row.timing_note or ""
    note = f"{note}; {row.mfu_formats.words()}".lstrip("; ") if row.mfu_formats is not None else note
    why_no_mbu = row.mbu_reason if row.tpot_s is not None and row.mbu is None else None
    if why_no_mbu and why_no_mbu not in note:  # a decode row's MBU column reads "-": say why
        note = f"{note}; MBU: {why_no_mbu}".lstrip("; ")
    if said := _achievable_caveats(row):  # the "?" after the vs achievable figure: why it is no plain fraction
        note = f"{note}; vs achievable: {said}".lstrip("; ")
    if (why_no_verdict := _verdict(row)[1]) is not None:
        note = f"{note}; no speedup verdict: {why_no_verdict}".lstrip("; ")
    if _ci_missed(row):  # a figure less precise than asked for must not read like one that made it
        note = f"CI target missed: {row.timer.stop}; {note}".rstrip("; ")
    return note


def _achievable_caveats(row: Row) -> str:
    """Why the row's vs-achievable figure is no plain fraction (another method, above 1: flags.achievable_caveats);
    '' for one that is."""
    return "; ".join(f"{f.name}: {f.why}" for f in flags_of(row) if f.name in ACHIEVABLE_FLAGS)


def _vs_achievable(row: Row) -> str:
    """The fraction of the achievable figure; marked `?` (the note says why) where it is not like for like or
    above 100%: never a plain percentage then (issue 42 item 2)."""
    return _pct(row.mfu_vs_achievable) + ("?" if row.mfu_vs_achievable is not None and _achievable_caveats(row)
                                          else "")


def _verdict(row: Row) -> tuple[str, str | None]:
    """The speedup's verdict as the one rule reads it (stats.reread: none where the case was contended or too few
    rounds were paired, in bundles written before the rule too) and why there is none; the note gives the why."""
    sp = row.speedup
    if sp is None:
        return "", None
    return reread(sp.verdict, sp.verdict_reason, sp.rounds, bool(row.contention and row.contention.contended))


def _speedup(row: Row) -> str:
    sp = row.speedup
    return f"{sp.value:.2f}x [{sp.ci95_low:.2f},{sp.ci95_high:.2f}] {_verdict(row)[0]}" if sp is not None else "-"


def _latency_ms(latency: Latency | None) -> str:
    """The median of a per-event latency (inference: TTFT of a prefill row, TPOT of a decode row), ms."""
    return number(latency.p50 * 1e3 if latency is not None else None, ".4g")


def _first_kind(values: dict[str, float] | None, suffix: str = "") -> str:
    """A training step's tokens, else generated (decode), else prompt (prefill) tokens: the work units the
    workload's case declares (row.throughput with suffix _per_s; energy.j_per_token by kind)."""
    found = [v for k in ("tokens", "generated_tokens", "prompt_tokens")
             if (v := (values or {}).get(k + suffix)) is not None]
    return format(found[0], ".4g") if found else "-"


def _tokens_per_s(row: Row) -> str:
    """Tokens per second at the median time."""
    return _first_kind(row.throughput, "_per_s")


def _steady(row: Row) -> str:
    """timing=sustained: TFLOP/s (or ms per call) of the steady window and when it began, or 'not reached'."""
    s = row.steady_state
    if s is None:
        return "-"
    w = s.steady_window
    figure = f"{w.tflops:.4g}" if w.tflops is not None else f"{w.median_s * 1e3:.4g} ms"
    return f"{figure} from {s.reached_after_s:.0f}s" if s.reached else f"not reached (last {figure})"


def _tflops(row: Row) -> str:
    return number(row.tflops, ".4g") if row.timing_valid else "-"


def _sol(row: Row) -> str:
    """The row's share of the speed of light and the roof that bounds it (its `roofline` record): a memory-bound row
    (a decode step, a small matmul, membw) is judged by this bandwidth share, not by its MFU."""
    r = row.roofline
    if r is None or (r.bound is None and r.sol_fraction is None):
        return "-"
    share = _pct(r.sol_fraction) if r.sol_fraction is not None and row.timing_valid else "-"
    return f"{share} {BOUND.get(r.bound or '', '')}".rstrip()


def _gbps(row: Row) -> str:
    """GB/s where bandwidth is the figure: membw rows and memory-bound rows."""
    memory = row.workload == "membw" or (row.roofline is not None and row.roofline.bound == "memory")
    return number(row.bandwidth_gbps, ".4g") if memory and row.timing_valid else "-"


def _median_ms(row: Row) -> str:
    return number(row.time_s.median * 1e3 if row.time_s is not None else None, ".4g")


def _energy(row: Row) -> str:
    """Where the row's energy came from (one device's rows share it: the header's); why not: _energy_why."""
    return f"{row.energy.source} ({row.energy.scope})" if row.energy is not None else ""


def _energy_why(rows: list[Row], limit: int | None) -> list[str]:
    """Each distinct reason a row's energy was not measured, once below the table (not six lines in every row)."""
    said = dict.fromkeys(e.reason for e in (r.energy for r in rows) if e and e.source == "not measured" and e.reason)
    return [line for why in said for line in paragraph(f"energy not measured: {why}", limit, "  ")]


def _phase(row: Row) -> str:
    """Rows written before `phase` was recorded show (and group under) no phase."""
    return row.phase or ""


BOUND = {"memory": "mem", "compute": "cmp"}
Cell = Callable[[Row], str]
# What a row is (lifted into the header line when every row has the same), then its figures (dropped when no row
# has one). (header, cell, wraps at, right-aligned)
IDENTITY: list[tuple[str, Cell, str, bool]] = [
    ("phase", _phase, "", False),
    ("workload", lambda r: r.workload, "", False),
    ("backend", lambda r: r.backend, "", False),
    ("dtype", lambda r: r.dtype, "", False),
    ("shape", _params, "-", False),
    ("status", lambda r: r.status, "", False),
    ("peak", lambda r: number(r.peak_tflops, ".4g"), "", True),
    ("energy", _energy, " ", False),
]
FIGURES: list[tuple[str, Cell, str, bool]] = [
    ("median ms", _median_ms, "", True),
    ("±CI95", _ci, "", True),
    ("TFLOP/s", _tflops, "", True),
    ("MFU", lambda r: _pct(r.mfu), "", True),
    ("vs achievable", _vs_achievable, "", True),
    ("GB/s", _gbps, "", True),
    ("SOL", _sol, " ", True),  # roofline share, mem or cmp: harness/machine/roofline.py
    ("speedup", _speedup, "] ", False),  # wraps before its verdict only: the value and its CI stay together
    ("TTFT ms", lambda r: _latency_ms(r.ttft_s), "", True),
    ("TPOT ms", lambda r: _latency_ms(r.tpot_s), "", True),
    ("tok/s", _tokens_per_s, "", True),
    ("MBU", lambda r: _pct(r.mbu), "", True),
    ("W", lambda r: number(r.energy.mean_power_w if r.energy else None, ".4g"), "", True),  # results/statistics/energy
    ("J/tok", lambda r: _first_kind(r.energy.j_per_token if r.energy else None), "", True),
    ("TFLOP/s/W", lambda r: number(r.energy.tflops_per_w if r.energy else None, ".4g"), "", True),
    ("steady TFLOP/s", _steady, " ", False),
    ("flags", lambda r: ",".join(row_flags(r)) or "-", ",", False),
]
EMPTY = ("-", "")
OPTIONAL = ("energy",)  # identity recorded since issue 39: left out of the header where no row has it
ALWAYS = {"inference": ("TTFT ms", "TPOT ms", "tok/s", "MBU")}  # shown even where no row has one (then noted why)
# Inference samples one event per sample (inner 1), and TTFT/TPOT's p50 is the median of those same samples
# (workloads/inference/spec.py `figures`), so its median time is the TTFT or TPOT column: printed once.
SAME_AS = {"inference": ("median ms",)}


def table(rows: Iterable[Row], wide: bool = False, width: int = WIDTH) -> str:
    """The end-of-run table, one section per (phase, workload); collective rows get nccl-tests' table instead
    (bandwidth, no FLOPs). `wide`: every column, notes in full, no width limit."""
    rows = list(rows)
    limit = None if wide else width
    collectives = [r for r in rows if r.workload == "collectives"]
    sections: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        if r.workload != "collectives":
            sections.setdefault((_phase(r), r.workload), []).append(r)
    parts = [_wide_table(group) if wide else _compact_table(group, limit) for group in sections.values()]
    if not parts and not collectives:
        parts.append(_wide_table([]))
    if collectives:
        parts.append(collectives_table(collectives, limit))
    if not wide and rows:
        parts.append("\n".join(paragraph(f"({WIDE_HINT})", limit)))
    return "\n\n".join(parts)


def _wide_table(rows: list[Row]) -> str:
    specs = [*IDENTITY, *FIGURES, ("note", _note, "", False)]
    columns = [Column(h, [cell(r) for r in rows], "", right) for h, cell, _, right in specs]
    return "\n".join([*render(columns, None), *_energy_why(rows, None)])


def _common_parts(shapes: Sequence[str]) -> list[str]:
    """The '-'-separated parts every shape has (in the first shape's order); none if removing them would leave
    a shape empty (then the shapes are shown whole)."""
    split = [s.split("-") for s in shapes]
    common = [p for p in split[0] if all(p in other for other in split[1:])] if split else []
    return [] if any(not [p for p in s if p not in common] for s in split) else common


def _compact_table(rows: list[Row], limit: int | None) -> str:
    same, columns = [], []
    for header, cell, wrap, right in IDENTITY:
        cells = [cell(r) for r in rows]
        if header in OPTIONAL and len(set(cells) - {""}) <= 1:  # none (older rows), or one for all rows that have one
            same += [f"{header} {c}" for c in set(cells) - {""}]  # (a skipped row has no energy: no column for it)
            continue
        if len(set(cells)) == 1:
            same.append(f"{header} {cells[0] or '-'}" + (" TFLOP/s" if header == "peak" and cells[0] != "-" else ""))
        else:
            columns.append(Column(header, cells, wrap, right))
    shape = next((c for c in columns if c.header == "shape"), None)
    if shape is not None and (common := _common_parts(shape.cells)):
        same.append("shape parts " + "-".join(common))
        columns[columns.index(shape)] = Column("shape", ["-".join(p for p in c.split("-") if p not in common)
                                                         for c in shape.cells], "-")
    workload = rows[0].workload
    for header, cell, wrap, right in FIGURES:
        if header in SAME_AS.get(workload, ()):
            continue
        cells = [cell(r) for r in rows]
        if any(c not in EMPTY for c in cells) or header in ALWAYS.get(workload, ()):
            columns.append(Column(header, cells, wrap, right))
    notes, marks = _footnotes(rows, limit)
    if any(marks):
        columns.append(Column("note", marks))
    same += _baseline(rows)
    head = paragraph("# same in every row: " + ", ".join(same), limit, "#   ") if same else []
    columns, groups = _shapes_as_headings(columns, limit)
    return "\n".join([*head, *render(columns, limit, groups), *notes, *_energy_why(rows, limit)])


def _shapes_as_headings(columns: list[Column], limit: int | None) -> tuple[list[Column], list[str] | None]:
    """A shape that would wrap in its column (an attention shape over three lines beside the speedup and flags
    columns, issue 42) becomes a heading line above its rows instead, `shape <parts>`, and the column goes."""
    shape = next((c for c in columns if c.header == "shape"), None)
    if shape is None or limit is None:
        return columns, None
    width = fit(columns, limit)[columns.index(shape)]
    if all(len(cell) <= width for cell in shape.cells):
        return columns, None
    return [c for c in columns if c is not shape], [f"shape {cell}" for cell in shape.cells]


def _baseline(rows: list[Row]) -> list[str]:
    """'speedups against B' for the header line, when every row with a speedup has the same baseline B."""
    baselines = {r.speedup.baseline for r in rows if r.speedup is not None}
    return [f"speedup = {baselines.pop()}'s time / the row's"] if len(baselines) == 1 else []


def _footnotes(rows: list[Row], limit: int | None) -> tuple[list[str], list[str]]:
    """Each distinct note once, numbered, below the table (wrapped at word boundaries, never cut); each row's
    note cell is its number."""
    numbered: dict[str, int] = {}
    marks = []
    for r in rows:
        note = _note(r)
        if note:
            numbered.setdefault(note, len(numbered) + 1)
        marks.append(f"[{numbered[note]}]" if note else "")
    lines = []
    for note, n in numbered.items():
        lines += paragraph(f"[{n}] {note}", limit, " " * (len(str(n)) + 3))
    return lines, marks


def progress_line(row: Row) -> str:
    head = f"{row.case_id} {row.backend}: {row.status}"
    if row.status != "ok":
        return f"{head} ({row.reason})"
    if not row.timing_valid:
        return f"{head} (correct; timing not valid here)"
    if row.tflops is None:
        return f"{head} {_bandwidth(row) or 'no throughput figure'}"
    return f"{head} {row.tflops:.3f} TFLOP/s, MFU {_pct(row.mfu)}"
