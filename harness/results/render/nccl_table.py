"""The collectives' end table, as nccl-tests prints its own (src/common.cu): one line per size, out-of-place and
in-place side by side, bus bandwidth beside algorithm bandwidth (table.py hands collective rows here)."""

from __future__ import annotations

from collections.abc import Sequence

from xmfu.harness.results.analysis.flags import row_flags
from xmfu.harness.results.render.text_table import number, wrap_cell
from xmfu.harness.results.schema.row import Row

NCCL_TYPES = {"fp32": "float", "bf16": "bfloat16", "fp16": "half"}  # nccl-tests' names for the data types
REDOPS = {"all_reduce": "sum", "reduce_scatter": "sum"}  # the others move data without reducing it
# nccl-tests' header (src/common.cu, as every all_reduce_perf log shows it): the names on one line, their units
# on the next, "out-of-place" and "in-place" above the two groups of figures; about 118 columns.
SIDE = [("time", "(us)"), ("algbw", "(GB/s)"), ("busbw", "(GB/s)"), ("#wrong", "")]
HEAD = [("size", "(B)"), ("count", "(elements)"), ("type", ""), ("redop", ""), *SIDE, *SIDE]


def _side(row: Row | None) -> list[str]:
    """time (us), algbw, busbw, #wrong of one placement, as nccl-tests prints them."""
    if row is None:
        return ["", "", "", ""]
    if row.status != "ok":
        return [row.status, "", "", str(row.wrong) if row.wrong is not None else ""]
    t = row.time_s.median if row.time_s is not None else None
    bus = row.busbw_gbps
    # an ok row without a count of wrong elements shows 0, as this table always has
    return [number(t * 1e6 if t else None, ".1f"), number(row.algbw_gbps, ".2f"),
            number(bus, ".2f") if bus is not None else "n/a", str(row.wrong) if row.wrong is not None else "0"]


def _pair_flags(pair: dict[str, Row]) -> str:
    """The flags of a size's rows, each placement's named where only one has it."""
    out = []
    for side, label in (("out", "oop"), ("in", "ip")):
        if pair.get(side):
            out += [f"{label} {f}" for f in row_flags(pair[side])]
    both = [f.split(" ", 1)[1] for f in out if f.startswith("oop ") and f.replace("oop ", "ip ", 1) in out]
    rest = [f for f in out if f.split(" ", 1)[1] not in both]
    return ",".join(both + rest) or "-"


IMPORTED_MODE = "as the log timed it"  # an imported nccl-tests row: its tool's mean time per operation


def collectives_table(rows: list[Row], width: int | None) -> str:
    """nccl-tests' table per (backend, operation, mode, type): size, count, type, redop, then time, algbw,
    busbw and #wrong out of place and in place side by side, and the average bus bandwidth; a `flags` column
    when a row has quality flags."""
    groups: dict[tuple, dict[int, dict[str, Row]]] = {}
    for r in rows:
        p = r.params  # the collective's own parameters (an open map); an imported log's have no mode
        key = (r.backend, p["op"], p.get("mode", IMPORTED_MODE), r.dtype)
        groups.setdefault(key, {}).setdefault(p["size_bytes"], {})["in" if p["in_place"] else "out"] = r
    out = []
    for (backend, op, mode, dtype), sizes in sorted(groups.items()):
        item = {"fp32": 4, "bf16": 2, "fp16": 2}.get(dtype, 4)
        body, busbw, flags = [], [], []
        for size, pair in sorted(sizes.items()):
            any_row = pair.get("out") or pair.get("in")
            actual = any_row.size_bytes_actual or size
            said = any_row.params  # an imported row keeps what its log printed: count, type, redop
            body.append([str(actual), str(said.get("count", actual // item)),
                         str(said.get("type") or NCCL_TYPES.get(dtype, dtype)), str(said.get("redop") or
                                                                                    REDOPS.get(op, "none")),
                         *_side(pair.get("out")), *_side(pair.get("in"))])
            busbw += [r.busbw_gbps for r in pair.values() if r.busbw_gbps is not None]
            flags.append(_pair_flags(pair))
        inferred = " (op inferred from the log's lines: notes.op_inferred)" if any_row.notes.get("op_inferred") else ""
        out.append(f"# {backend} {op} ({mode}), ranks: {any_row.ranks or any_row.notes.get('ranks')}{inferred}")
        out += _nccl_lines(body, flags if any(f != "-" for f in flags) else None, width)
        avg = f"{sum(busbw) / len(busbw):.3g} GB/s" if busbw else "n/a (one rank)"
        out.append(f"# Avg bus bandwidth: {avg} (over this sweep's sizes: it depends on the range chosen)")
    return "\n".join(out)


def _nccl_lines(body: list[list[str]], flags: list[str] | None, width: int | None) -> list[str]:
    """The header's three lines and the rows, right-aligned as nccl-tests prints them; flags last, left-aligned
    and wrapped at ',' when the line would pass `width`."""
    widths = [max(len(name), len(unit), *(len(c[i]) for c in body)) for i, (name, unit) in enumerate(HEAD)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))

    side = sum(widths[4:8]) + 2 * 3
    group = " " * (sum(widths[:4]) + 2 * 4) + "out-of-place".center(side) + "  " + "in-place".center(side)
    lines = [group.rstrip(), line([n for n, _ in HEAD]), line([u for _, u in HEAD]).rstrip()]
    rows = [line(c) for c in body]
    if flags is None:
        return [*lines, *rows]
    lines[1] += "  flags"
    room = max(len("flags"), width - len(rows[0]) - 2) if width else max(map(len, flags))
    out = list(lines)
    for text, cells in zip(rows, flags, strict=True):
        wrapped = wrap_cell(cells, room, ",")
        out.append(f"{text}  {wrapped[0]}")
        out += [" " * (len(text) + 2) + more for more in wrapped[1:]]
    return out
