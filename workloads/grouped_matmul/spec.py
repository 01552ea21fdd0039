"""Grouped matmul, a mixture of experts' expert GEMM: C[rows of g] = A[rows of g] @ B[g] for G groups in one call.

A (M, K) holds every group's rows one after another (tokens sorted by expert), B (G, K, N) one matrix per group,
C (M, N) follows A. The split of the M rows over the G groups is seeded: `even` (M/G each) or `random` (each row's
group drawn uniformly, as a router with random weights assigns them; groups come out uneven, some may be empty).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from xmfu.harness.engine.case import Check
from xmfu.harness.engine.declare import POSITIVE_INT, ConfigError, OneOf, as_list, setting
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.dtypes import DTYPES, uniform_inputs
from xmfu.workloads.matmul.spec import TOLERANCE

FLOP_CONVENTION = "grouped-matmul-2mnk/1"
SPLITS = ("even", "random")
WORKLOAD_DTYPES = ("fp32", "bf16", "fp16")
FULL_CHECK_LIMIT = 2**33  # M*N*K above this: compare edge and sampled rows instead of every row
# The MoE presets' expert GEMM (the gate and up projections: K = d_model, N = expert width), [G, M, N, K] with
# M = the preset's batch x seq_len tokens x top_k (configs/model/; tests/workloads/test_grouped_matmul.py checks).
DEFAULT_SHAPES = ((16, 16384, 512, 768),  # moe-small: 8 x 1024 tokens, top-2 of 16 experts of 512, d_model 768
                  (8, 8192, 14336, 4096),  # mixtral-8x7b: 1 x 4096 tokens, top-2 of 8 experts of 14336
                  (256, 32768, 2048, 7168))  # deepseek-v3: 1 x 4096 tokens, top-8 of 256 experts of 2048


@dataclass(frozen=True)
class GroupedMatmulSettings:
    """`workload=grouped_matmul`: a mixture of experts' expert GEMM, G groups of rows of one A against G matrices B
    in one call; FLOPs 2*M*N*K (M: all groups' rows)."""

    name: str = setting("grouped_matmul", "the workload")
    shapes: Any = setting(DEFAULT_SHAPES, "[G, M, N, K] shapes (groups, rows of all groups, N, K); the default: "
                          "the expert GEMMs of moe-small, mixtral-8x7b and deepseek-v3", POSITIVE_INT)
    split: Any = setting("random", "how the M rows split over the groups: even | random (seeded, uneven), or a "
                         "list of both", OneOf(SPLITS))


@dataclass(frozen=True)
class GroupedMatmulCase:
    groups: int
    m: int
    n: int
    k: int
    dtype: str
    split: str = "random"
    seed: int = 0

    workload: ClassVar[str] = "grouped_matmul"
    flop_convention: ClassVar[str] = FLOP_CONVENTION

    @property
    def case_id(self) -> str:
        return f"grouped_matmul-{self.dtype}-g{self.groups}-{self.m}x{self.n}x{self.k}-{self.split}"

    def group_sizes(self) -> np.ndarray:
        """(G,) int rows per group, summing to M."""
        return _group_sizes(self.groups, self.m, self.split, self.seed)

    def offsets(self) -> np.ndarray:
        """(G + 1,) int32: group g's rows are offsets[g]:offsets[g + 1]."""
        return np.concatenate([[0], np.cumsum(self.group_sizes())]).astype(np.int32)

    def params(self) -> dict[str, Any]:
        sizes = self.group_sizes()
        return {"groups": self.groups, "m": self.m, "n": self.n, "k": self.k, "split": self.split,
                "group_sizes": [int(s) for s in sizes], "imbalance": float(sizes.max() / sizes.mean())}

    def flops(self) -> float:
        # Each of the M rows meets its group's (K, N) matrix: 2 FLOPs per multiply-add, as for one matmul
        # (workloads/matmul/spec.py); the sum over groups of 2·m_g·N·K.
        return 2.0 * self.m * self.n * self.k

    def input_bytes(self) -> float:
        return float((self.m * self.k + self.groups * self.k * self.n) * DTYPES[self.dtype].itemsize)

    def bytes_moved(self) -> float:
        # Compulsory traffic: A and all G matrices of B read once, C written once.
        return self.input_bytes() + self.m * self.n * DTYPES[self.dtype].output_itemsize

    def memory_bytes(self) -> float:
        """A, B and C, and the host's float32 inputs and their float64 copies the check keeps beside them."""
        return self.bytes_moved() + (self.m * self.k + self.groups * self.k * self.n) * (4 + 8)

    def inputs(self) -> dict[str, np.ndarray]:
        """`a` (M, K) and `b` (G, K, N), float32 rounded to the dtype, and `group_sizes` (G,) int32 (a plug-in's
        view: it returns C (M, N))."""
        a, b = _inputs(self)
        return {"a": a, "b": b, "group_sizes": self.group_sizes().astype(np.int32)}

    def check_rows(self) -> np.ndarray | None:
        if self.m * self.n * self.k <= FULL_CHECK_LIMIT:
            return None
        # Every group's first and last rows (boundary tiles) and seeded random rows.
        offsets = self.offsets()
        edges = np.concatenate([offsets[:-1], offsets[1:] - 1])
        picked = np.concatenate([edges, np.random.default_rng(self.seed + 1).integers(0, self.m, 64)])
        return np.unique(np.clip(picked, 0, self.m - 1))

    def check(self, rows: np.ndarray) -> Check:
        a, b = (x.astype(np.float64) for x in _inputs(self))
        selected = self.check_rows()
        idx = np.arange(self.m) if selected is None else selected
        ref = _per_group(a, b, self, idx)
        scale = float(np.max(np.abs(ref))) or 1.0
        error = float(np.max(np.abs(rows - ref))) / scale if rows.shape == ref.shape else float("inf")
        checked = (f"all {self.m}x{self.n} outputs" if selected is None
                   else f"{len(idx)} rows (each group's first and last, 64 random) of {self.m}")
        tol = TOLERANCE[self.dtype]
        return Check(error <= tol, error, tol, "max|C-Cref|/max|Cref|", checked)


def _per_group(a: np.ndarray, b: np.ndarray, case: GroupedMatmulCase, idx: np.ndarray) -> np.ndarray:
    """The reference rows `idx` (sorted), one fp64 matmul per group."""
    offsets = case.offsets()
    out = np.empty((len(idx), case.n))
    for g in range(case.groups):
        inside = (idx >= offsets[g]) & (idx < offsets[g + 1])
        if inside.any():
            out[inside] = a[idx[inside]] @ b[g]
    return out


@lru_cache(maxsize=4)
def _group_sizes(groups: int, m: int, split: str, seed: int) -> np.ndarray:
    if split == "even":
        return np.full(groups, m // groups) + (np.arange(groups) < m % groups)
    return np.random.default_rng(seed + 2).multinomial(m, np.full(groups, 1.0 / groups))


@lru_cache(maxsize=1)
def _inputs(case: GroupedMatmulCase) -> tuple[np.ndarray, np.ndarray]:
    x = uniform_inputs(case.seed, {"a": (case.m, case.k), "b": (case.groups, case.k, case.n)}, case.dtype)
    return x["a"], x["b"]


def expand(workload: Mapping[str, Any], dtype: str, seed: int) -> Sequence[GroupedMatmulCase]:
    """One case per shape [G, M, N, K] and split."""
    s = parse_section("workload", GroupedMatmulSettings, workload)
    if dtype not in WORKLOAD_DTYPES:
        raise ConfigError("dtype", f"{dtype} is not a grouped matmul dtype here", ", ".join(WORKLOAD_DTYPES))
    cases = []
    for i, dims in enumerate(s.shapes):
        if not isinstance(dims, (list, tuple)) or len(dims) != 4:
            raise ConfigError(f"workload.shapes[{i}]", f"{dims!r} is not [G, M, N, K]", "four positive integers")
        cases += [GroupedMatmulCase(*dims, dtype, split, seed) for split in dict.fromkeys(as_list(s.split))]
    if not cases:
        raise ConfigError("workload.shapes", "is empty", "one or more [G, M, N, K], e.g. [[8, 4096, 1024, 512]]")
    return cases
