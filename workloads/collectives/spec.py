"""Collectives: sizes, bus-bandwidth factors and exact-result data exactly as nccl-tests define them.

nccl-tests doc/PERFORMANCE.md: algbw = S / t; busbw = algbw · F(n) for n ranks, with S and F per operation:
all_reduce S = buffer, F = 2(n-1)/n; reduce_scatter S = whole input (n x per-rank output), F = (n-1)/n;
all_gather S = whole output, F = (n-1)/n; all_to_all S = per-rank buffer, F = (n-1)/n; broadcast S = buffer,
F = 1. GB/s = 1e9 B/s. With one rank nothing crosses a link, so busbw is not applicable.

all_to_all_v (an expert-parallel dispatch: every pair of ranks exchanges a different count, `alltoallv_splits`)
has no entry in nccl-tests' PERFORMANCE.md; xmfu counts it as its alltoall: S = the mean per-rank send buffer
(all ranks' bytes / n, which is alltoall's S when the splits are even), F = (n-1)/n. The bytes of the busiest
rank, which the slowest transfer waits for, are in the row's notes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from xmfu.harness.engine.case import Check
from xmfu.harness.engine.declare import (
    POSITIVE,
    POSITIVE_INT,
    ConfigError,
    Number,
    OneOf,
    Range,
    as_list,
    boolean,
    setting,
)
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.dtypes import DTYPES

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_v", "broadcast")
MODES = ("throughput", "latency")  # n back-to-back ops per sample | one op per sample, barrier outside
COLLECTIVE_DTYPES = ("fp32", "bf16", "fp16")
SIZE_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30}  # nccl-tests' -b/-e suffixes


@dataclass(frozen=True)
class SizeSweep:
    """Sizes like nccl-tests' -b 8 -e 64M -f 2 (bytes; K, M, G are powers of 1024)."""

    start: Any = setting(8, "the first size")
    end: Any = setting("64M", "the last size at most")
    factor: Number = setting(2, "each size is the last times this", Range(1))


@dataclass(frozen=True)
class CollectivesSettings:
    """`workload=collectives`: collectives as nccl-tests measures them: algbw = S/t, busbw = algbw x F(n), data
    checked exactly. Launch ranks with torchrun (torch_dist) or give JAX several devices."""

    name: str = setting("collectives", "the workload")
    ops: Any = setting(OPS, "operations", OneOf(OPS))
    sweep: SizeSweep | None = setting(SizeSweep(), "sizes from start to end, times factor each step (used when "
                                      "sizes is empty)")
    sizes: Any = setting((), "a list of sizes instead of the sweep, e.g. [1M, 64M]")
    in_place: Any = setting("auto", "auto: the placements torch and NCCL both have per op | a list, e.g. "
                            "[false, true]")
    mode: Any = setting(("throughput",), "throughput: iters back-to-back ops per sample | latency: one op, "
                        "barrier outside", OneOf(MODES))
    iters: int = setting(20, "ops per throughput sample (nccl-tests -n)", POSITIVE_INT)
    warmup: int = setting(5, "untimed ops first (nccl-tests -w); the first call also forms communicators",
                          POSITIVE_INT)
    samples: int = setting(10, "samples per case, the same on every rank", POSITIVE_INT)
    timeout_s: Number = setting(120, "a collective (or a rank joining) slower than this fails the run cleanly",
                                POSITIVE)
    inject_corruption: bool = setting(False, "self-test: plant one wrong element on the last rank; the data check "
                                      "must catch it")


def bus_factor(op: str, ranks: int) -> float | None:
    """F(n) of nccl-tests; None for one rank (no bus)."""
    if ranks < 2:
        return None
    n = ranks
    return {"all_reduce": 2 * (n - 1) / n, "reduce_scatter": (n - 1) / n, "all_gather": (n - 1) / n,
            "all_to_all": (n - 1) / n, "all_to_all_v": (n - 1) / n, "broadcast": 1.0}[op]


def parse_bytes(field: str, value: Any) -> int:
    """8, '8', '64K', '1M', '2G' (powers of 1024, as nccl-tests) -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([BKMG]?)\s*", str(value).upper())
    if not match or int(match.group(1)) <= 0:
        raise ConfigError(field, f"{value!r} is not a size", "a positive byte count, optionally with K, M or G")
    return int(match.group(1)) * SIZE_UNITS[match.group(2)]


def size_sweep(value: Any) -> list[int]:
    """A list of sizes, or {start, end, factor} like nccl-tests' -b/-e/-f."""
    if isinstance(value, Mapping):
        value = parse_section("workload.sweep", SizeSweep, value)
    if isinstance(value, SizeSweep):
        start, end = parse_bytes("workload.sweep.start", value.start), parse_bytes("workload.sweep.end", value.end)
        factor = float(value.factor)
        if end < start:
            raise ConfigError("workload.sweep", f"start={start} end={end} factor={factor} is not a sweep",
                              "start <= end")
        sizes, s = [], float(start)
        while s <= end:
            sizes.append(int(s))
            s *= factor
        return sizes
    if isinstance(value, (list, tuple)) and value:
        return [parse_bytes(f"workload.sizes[{i}]", v) for i, v in enumerate(value)]
    raise ConfigError("workload.sizes", f"{value!r} is not a size sweep", "a list, or {start, end, factor}")


def pattern(rank: int | np.ndarray, index: np.ndarray) -> np.ndarray:
    """Rank r's value at element i: small integers in [-2, 1], so any sum over up to 128 ranks is exact even
    in bf16 (8 significant bits). Different per rank and per position, so a misplaced chunk is caught."""
    return (((index * 7 + np.asarray(rank) * 3) % 4) - 2).astype(np.float32)


@dataclass(frozen=True)
class Layout:
    """Element counts for one rank, given the operation, S and n (S rounded down to what divides evenly)."""

    input_count: int
    output_count: int
    bytes: int  # S actually moved, as nccl-tests reports it
    splits: tuple[tuple[int, ...], ...] | None = None  # all_to_all_v: elements rank s sends rank d, [s][d]

    def sends(self, rank: int) -> list[int]:
        """all_to_all_v: what `rank` sends each rank, in rank order."""
        return list(self.splits[rank])

    def receives(self, rank: int) -> list[int]:
        """all_to_all_v: what `rank` receives from each rank, in rank order."""
        return [row[rank] for row in self.splits]


def alltoallv_splits(ranks: int, elements: int) -> tuple[tuple[int, ...], ...]:
    """(n, n) elements rank s sends rank d: the even chunk (elements / n) times a factor in [0.25, 1.75) drawn
    from a fixed seed, so every pair differs (some ranks send or receive up to about 1.75x the even share) while
    the total stays near n x elements. The same on every rank (no communication needed to agree on it)."""
    chunk = max(elements // ranks, 1)
    factors = np.random.default_rng(1234).uniform(0.25, 1.75, (ranks, ranks))
    return tuple(tuple(max(int(f * chunk), 1) for f in row) for row in factors)


def layout(op: str, size_bytes: int, itemsize: int, ranks: int) -> Layout:
    elements = max(size_bytes // itemsize, 1)
    if op in ("all_reduce", "broadcast"):
        return Layout(elements, elements, elements * itemsize)
    per_rank = max(elements // ranks, 1)
    if op == "all_gather":  # S = whole output = n x per-rank input
        return Layout(per_rank, per_rank * ranks, per_rank * ranks * itemsize)
    if op == "reduce_scatter":  # S = whole input = n x per-rank output
        return Layout(per_rank * ranks, per_rank, per_rank * ranks * itemsize)
    if op == "all_to_all_v":  # S = the mean per-rank send buffer; counts per rank differ
        splits = alltoallv_splits(ranks, elements)
        total = sum(map(sum, splits))
        return Layout(max(map(sum, splits)), max(sum(r[d] for r in splits) for d in range(ranks)),
                      total * itemsize // ranks, splits)
    return Layout(per_rank * ranks, per_rank * ranks, per_rank * ranks * itemsize)  # all_to_all: per-rank buffer


def rank_input(op: str, rank: int, lay: Layout) -> np.ndarray:
    count = sum(lay.sends(rank)) if op == "all_to_all_v" else lay.input_count
    return pattern(rank, np.arange(count))


def expected_output(op: str, rank: int, ranks: int, lay: Layout) -> np.ndarray:
    """What rank `rank` must hold after the operation (broadcast root: rank 0)."""
    i = np.arange(lay.output_count)
    all_ranks = np.arange(ranks)[:, None]
    if op == "all_reduce":
        return pattern(all_ranks, i[None, :]).sum(axis=0)
    if op == "broadcast":
        return pattern(0, i)
    if op == "all_gather":  # chunk q is rank q's input
        c = lay.input_count
        return pattern(i // c, i % c)
    if op == "reduce_scatter":  # element i of this rank's slice of everyone's input, summed
        return pattern(all_ranks, (rank * lay.output_count + i)[None, :]).sum(axis=0)
    if op == "all_to_all_v":  # from each rank q in turn, the part of q's buffer q addressed to this rank
        return np.concatenate([pattern(q, sum(row[:rank]) + np.arange(row[rank])) for q, row in enumerate(lay.splits)])
    c = lay.output_count // ranks  # all_to_all: chunk q came from rank q, which sent its chunk `rank`
    return pattern(i // c, rank * c + i % c)


@dataclass(frozen=True)
class CollectiveCase:
    op: str
    size_bytes: int
    dtype: str
    in_place: bool
    mode: str
    iters: int = CollectivesSettings.iters
    warmup: int = CollectivesSettings.warmup
    samples: int = CollectivesSettings.samples
    timeout_s: float = CollectivesSettings.timeout_s
    inject_corruption: bool = CollectivesSettings.inject_corruption  # self-test of the data check
    seed: int = 0

    workload: ClassVar[str] = "collectives"
    flop_convention: ClassVar[str] = "nccl-tests-busbw/1"

    @property
    def case_id(self) -> str:
        place = "inplace" if self.in_place else "outofplace"
        return f"{self.op}-{self.dtype}-{self.size_bytes}B-{place}-{self.mode}"

    def params(self) -> dict[str, Any]:
        return {"op": self.op, "size_bytes": self.size_bytes, "in_place": self.in_place, "mode": self.mode,
                "iters": self.iters if self.mode == "throughput" else 1, "samples": self.samples}

    def flops(self) -> float:
        return 0.0

    def bytes_moved(self) -> float:
        return float(self.size_bytes)

    def off_roofline(self) -> str:
        """Why a collective is not placed on the roofline (harness/machine/roofline.py): its time is bound by its
        links, which busbw measures, and a single rank may move nothing through DRAM at all."""
        return "a collective is bound by its links, not by DRAM: see busbw_gbps against the link bandwidth"

    def layout(self, ranks: int) -> Layout:
        return layout(self.op, self.size_bytes, DTYPES[self.dtype].itemsize, ranks)

    def bandwidth(self, seconds: float, ranks: int | None) -> dict[str, Any]:
        """algbw and busbw (GB/s) for one operation taking `seconds` on `ranks` ranks."""
        if not ranks:
            return {}
        size = self.layout(ranks).bytes
        algbw = size / seconds / 1e9
        factor = bus_factor(self.op, ranks)
        return {"size_bytes_actual": size, "algbw_gbps": algbw, "bus_factor": factor,
                "busbw_gbps": algbw * factor if factor is not None else None,
                "busbw_note": None if factor is not None else "one rank: no bus, busbw not applicable"}

    def check_rows(self) -> None:
        return None

    def check(self, result: dict[str, int]) -> Check:
        wrong = int(result["wrong"])
        return Check(wrong == 0, float(wrong), 0.0, "#wrong elements (all ranks)",
                     f"{result['elements']} elements on {result['ranks']} ranks, exact comparison")


def expand(workload: Mapping[str, Any], dtype: str, seed: int) -> Sequence[CollectiveCase]:
    s = parse_section("workload", CollectivesSettings, workload)
    if dtype not in COLLECTIVE_DTYPES:
        raise ConfigError("dtype", f"{dtype} is not a collectives dtype", ", ".join(COLLECTIVE_DTYPES))
    common = {"iters": s.iters, "warmup": s.warmup, "samples": s.samples, "timeout_s": float(s.timeout_s),
              "inject_corruption": s.inject_corruption}
    sizes = size_sweep(s.sizes or s.sweep)
    return [CollectiveCase(op, size, dtype, place, mode, seed=seed, **common)
            for op in as_list(s.ops) for mode in as_list(s.mode) for place in placements(op, s.in_place)
            for size in sizes]


# `in_place: auto`: the placements torch.distributed and NCCL's API both express for each operation (an
# out-of-place all_reduce or broadcast has no torch call; all_to_all has no in-place form in either), so a
# default plan has no row that could only be skipped. An explicit list asks for exactly those placements.
AUTO_PLACEMENTS = {"all_reduce": [True], "broadcast": [True], "all_to_all": [False], "all_to_all_v": [False],
                   "all_gather": [False, True], "reduce_scatter": [False, True]}


def placements(op: str, value: Any) -> list[bool]:
    if value == "auto":
        return AUTO_PLACEMENTS[op]
    return [boolean("workload.in_place", v) for v in as_list(value)]
