"""Which rows belong together in a plot, and the shortest labels that still tell them apart.

A series (one line in a plot against size) is the rows that share the workload, backend, dtype, device, rank
count, phase and every parameter except the size axis, so no line joins a causal and a non-causal attention,
a forward and a forward+backward pass, or two matmul shapes of equal FLOPs. Labels name only what varies
among the rows drawn together (what is constant goes in the title), so they stay short without being cut.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from itertools import pairwise
from typing import Any, TypeVar

from xmfu.harness.results.schema.row import Row

T = TypeVar("T")
# How a boolean parameter reads when true / false; any other is `name` / `no name`.
BOOL_WORDS = {"causal": ("causal", "non-causal"), "in_place": ("in-place", "out-of-place"),
              "activation_checkpointing": ("checkpointed", "no checkpointing")}
IDENTITY = ("backend", "dtype", "device", "ranks", "phase")  # row fields that split series besides params
# When the size parameters do not grow together (a grid of shapes), the one that is the size axis, by
# preference; the others then split series. Later names are later picks.
SIZE_PREFERENCE = ("size_bytes", "seq_len", "seq_q", "seq_kv", "k", "n", "m", "batch")
# Parameters named first in labels, in this order (bundles store params sorted by name: k, m, n reads badly).
PARAM_FIRST = ("op", "mode", "causal", "m", "n", "k", "batch", "seq_q", "seq_kv", "seq_len")


def ranks(row: Row) -> Any:
    """The row's rank count, or the one its backend noted (rows written before `ranks` was a field)."""
    return row.ranks or row.notes.get("ranks")


def value(row: Row, name: str) -> Any:
    """A field for grouping: a row field (by its name), 'ranks', or 'params.NAME'."""
    if name.startswith("params."):
        return row.params.get(name[len("params."):])
    return ranks(row) if name == "ranks" else getattr(row, name)


def word(name: str, v: Any) -> str:
    """One field as a label word: 'causal' / 'non-causal', 'fwd_bwd', 'seq_q=64', 'torch'."""
    key = name.removeprefix("params.")
    if isinstance(v, bool):
        yes, no = BOOL_WORDS.get(key, (key, f"no {key}"))
        return yes if v else no
    if key == "ranks":
        return f"{v} ranks"
    if key == "run_id":
        return f"run {v}"
    if not name.startswith("params.") or isinstance(v, str):
        return str(v)
    return f"{key}={v:g}" if isinstance(v, float) else f"{key}={v}"


def sort_key(v: Any) -> tuple[int, float, str]:
    """Numbers in numeric order (512 before 4096), then everything else as text."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (0, float(v), "")
    return (1, 0.0, str(v))


def param_names(rows: Iterable[Row]) -> list[str]:
    names = {k for r in rows for k in r.params}
    first = [k for k in PARAM_FIRST if k in names]
    return [f"params.{k}" for k in [*first, *sorted(names - set(first))]]


def varying(rows: Sequence[Row], names: Iterable[str]) -> list[str]:
    """The fields among `names` that take more than one value in `rows`."""
    return [n for n in names if _varies(rows, n)]


def _varies(rows: Sequence[Row], name: str) -> bool:
    """True at the first row whose value differs from the first row's (compared as repr, so 1, 1.0 and True
    differ); the values are not all collected first."""
    if not rows:
        return False
    first = repr(value(rows[0], name))
    return any(repr(value(r, name)) != first for r in rows)


def labels(rows: Sequence[Row], names: Sequence[str] | None = None) -> list[str]:
    """A label per row from the fields that vary among `rows` (default: identity fields and params); rows
    that would still read the same (one case in two runs) get their run id too."""
    names = list(names) if names is not None else [*IDENTITY, *param_names(rows)]
    shown = varying(rows, names) or ["backend"]
    out = [" ".join(word(n, value(r, n)) for n in shown if value(r, n) is not None) or "-" for r in rows]
    twice = {s for s, n in Counter(out).items() if n > 1}  # out.count per label was O(N^2)
    runs = short_runs({r.run_id for r in rows})
    return [f"{s} (run {runs[r.run_id]})" if s in twice else s for s, r in zip(out, rows, strict=True)]


def short_runs(run_ids: Iterable[str]) -> dict[str, str]:
    """Run ids as labels: the last '-' part (xmfu's run ids end in a random hex) where that tells them apart."""
    ids = sorted(run_ids)
    tails = [i.rsplit("-", 1)[-1] for i in ids]
    unique = len(set(tails)) == len(tails)
    return {i: t if unique else i for i, t in zip(ids, tails, strict=True)}


def constant(rows: Sequence[Row], names: Sequence[str]) -> str:
    """What all `rows` share among `names`, as words (for a title)."""
    differ = set(varying(rows, names))  # once: inside the condition it re-scanned every row once per name
    same = [n for n in names if n not in differ]
    return ", ".join(word(n, value(rows[0], n)) for n in same if rows and value(rows[0], n) is not None)


def group(items: Iterable[T], key: Callable[[T], Any]) -> dict[Any, list[T]]:
    """Items by key, in the order of each key's first item (rows, or a run's telemetry readings)."""
    out: dict[Any, list[T]] = defaultdict(list)
    for item in items:
        out[key(item)].append(item)
    return dict(out)


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_chain(rows: Sequence[Row], names: Sequence[str]) -> bool:
    """True when sorting by the first name sorts all of them: the sizes grow together (one shape family)."""
    points = sorted({tuple(value(r, n) for n in names) for r in rows})
    return all(all(a <= b for a, b in zip(p, q, strict=True)) for p, q in pairwise(points))


def size_axis(rows: Sequence[Row]) -> list[str]:
    """The numeric parameters that make the size axis of these rows (see the module docstring)."""
    numeric = [n for n in varying(rows, param_names(rows)) if all(_numeric(value(r, n)) for r in rows)]
    others = [n for n in [*IDENTITY, *param_names(rows)] if n not in numeric]
    if all(_is_chain(part, numeric) for part in group(rows, lambda r: tuple(repr(value(r, n)) for n in others))
           .values()):
        return numeric
    by_preference = sorted(numeric, key=lambda n: (SIZE_PREFERENCE.index(n[7:]) if n[7:] in SIZE_PREFERENCE
                                                    else len(SIZE_PREFERENCE), n))
    return by_preference[:1]


def series(rows: Sequence[Row], x: Callable[[Row], float]) -> dict[str, list[Row]]:
    """label -> rows of one series, sorted by `x`; rows of one workload at a time. A series holding the same
    size twice (the same case in two runs) is split by run, so a line never doubles back."""
    size = size_axis(rows)
    rest = [n for n in [*IDENTITY, *param_names(rows)] if n not in size]
    parts = list(group(rows, lambda r: tuple(repr(value(r, n)) for n in rest)).values())
    split: list[list[Row]] = []
    for part in parts:
        xs = [x(r) for r in part]
        split += list(group(part, lambda r: r.run_id).values()) if len(set(xs)) < len(xs) else [part]
    out: dict[str, list[Row]] = {}
    for label, part in zip(labels([p[0] for p in split], rest), split, strict=True):
        out[label if label not in out else f"{label} ({len(out)})"] = sorted(part, key=x)
    return out
