"""Memory bandwidth: the four STREAM kernels (Copy, Scale, Add, Triad), bytes and FLOPs counted as STREAM counts them.

J. D. McCalpin's STREAM (stream.c 5.10, and its reference page www.cs.virginia.edu/stream/ref.html) times
Copy c = a, Scale b = q*c, Add c = a + b and Triad a = b + q*c, and divides 2, 2, 3 and 3 arrays' worth of bytes
(`bytes[4] = {2, 2, 3, 3} * sizeof(STREAM_TYPE) * STREAM_ARRAY_SIZE`) by the time: every array read and every array
written counted once, the write-allocate read a cache may add not counted. Its table of the kernels states 0, 1, 1
and 2 FLOPs per iteration. BabelStream (UoB-HPC, src/main.cpp 5.0: Copy, Mul, Add, Triad with sizes 2, 2, 3 and 3
times sizeof(T) times ARRAY_SIZE) counts the same. GB/s = 1e9 B/s, as both print MB/s = 1e6 B/s.

Two differences, both for xmfu's other figures' sake: every kernel reads seeded inputs uniform in [-1, 1] (STREAM
fills constants: constant data lowers power, CUTLASS's guidance) into an output of its own, so each case is one
kernel and is checked on its own; and the time is the median of xmfu's samples (STREAM and BabelStream report the
fastest of their repeats). The scalar is STREAM's 3.0, exact in every dtype, so a result has at most two roundings.
STREAM's rule for a valid run is arrays of at least 4x the last-level cache; the default sizes meet it on every GPU
of the peak table (2^28 fp32 elements are 1 GiB per array, MI300X's Infinity Cache 256 MB), and each row notes its
arrays against the device's cache.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from xmfu.harness.engine.case import Check
from xmfu.harness.engine.declare import POSITIVE_INT, ConfigError, OneOf, setting
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.dtypes import DTYPES, uniform_inputs

FLOP_CONVENTION = "stream-mccalpin/1"
KERNELS = ("copy", "scale", "add", "triad")
# (arrays read, arrays written, FLOPs per element): STREAM's reference table and stream.c's bytes[] = {2, 2, 3, 3}
COUNTS = {"copy": (1, 1, 0), "scale": (1, 1, 1), "add": (2, 1, 1), "triad": (2, 1, 2)}
INPUTS = {"copy": ("x",), "scale": ("x",), "add": ("x", "y"), "triad": ("x", "y")}
SCALAR = 3.0  # stream.c: scalar = 3.0
MEMBW_DTYPES = ("fp32", "bf16", "fp16")
DEFAULT_SIZES = (2**25, 2**28)  # BabelStream's default ARRAY_SIZE 2^25, and 2^28 for STREAM's 4x-cache rule
FULL_CHECK_LIMIT = 2**24  # elements above this: compare the first, last and 4096 seeded random ones
# Unit roundoff of each dtype (2^-24, 2^-8, 2^-11): at most two roundings (q*y, then the add), each within one unit
# of the result's magnitude scale; 4 units leave room for the metric's max|ref| normalisation. Copy is exact.
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "bf16": 2.0**-8, "fp16": 2.0**-11}


@dataclass(frozen=True)
class MembwSettings:
    """`workload=membw`: the STREAM kernels (copy, scale, add, triad), bytes counted as STREAM counts them: the
    memory roof beside mamf's compute roof."""

    name: str = setting("membw", "the workload")
    kernels: tuple[str, ...] = setting(KERNELS, "STREAM kernels: copy c=a, scale b=3c, add c=a+b, triad a=b+3c",
                                       OneOf(KERNELS))
    sizes: tuple[int, ...] = setting(DEFAULT_SIZES, "elements per array (each kernel reads and writes arrays of "
                                     "this length)", POSITIVE_INT)


@dataclass(frozen=True)
class MembwCase:
    kernel: str
    n: int
    dtype: str
    seed: int = 0

    workload: ClassVar[str] = "membw"
    flop_convention: ClassVar[str] = FLOP_CONVENTION

    @property
    def case_id(self) -> str:
        return f"membw-{self.dtype}-{self.kernel}-{self.n}"

    def params(self) -> dict[str, object]:
        return {"kernel": self.kernel, "n": self.n, "scalar": SCALAR}

    def flops(self) -> float:
        return float(COUNTS[self.kernel][2] * self.n)

    def array_bytes(self) -> float:
        return float(self.n * DTYPES[self.dtype].itemsize)

    def input_bytes(self) -> float:
        return COUNTS[self.kernel][0] * self.array_bytes()

    def bytes_moved(self) -> float:
        # STREAM's count: each array read once and each array written once (no write-allocate traffic).
        reads, writes, _ = COUNTS[self.kernel]
        return (reads + writes) * self.array_bytes()

    def bandwidth(self, seconds: float, ranks: int | None) -> dict[str, float]:
        """The engine's `bandwidth` hook: GB/s at the median time, for copy too (no FLOPs, so no TFLOP/s)."""
        return {"bandwidth_gbps": self.bytes_moved() / seconds / 1e9}

    @property
    def tolerance(self) -> float:
        return 0.0 if self.kernel == "copy" else 4 * UNIT_ROUNDOFF[self.dtype]

    def inputs(self) -> dict[str, np.ndarray]:
        """The kernel's inputs (x, and y for add and triad), float32 arrays of values representable in the dtype."""
        return _inputs(self)

    def reference(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The kernel's result in fp64 from the (rounded) inputs, at `rows` (None: every element)."""
        x = {k: (v if rows is None else v[rows]).astype(np.float64) for k, v in self.inputs().items()}
        return {"copy": lambda: x["x"], "scale": lambda: SCALAR * x["x"], "add": lambda: x["x"] + x["y"],
                "triad": lambda: x["x"] + SCALAR * x["y"]}[self.kernel]()

    def check_rows(self) -> np.ndarray | None:
        if self.n <= FULL_CHECK_LIMIT:
            return None
        rng = np.random.default_rng(self.seed + 1)
        picked = np.concatenate([np.arange(4096), np.arange(self.n - 4096, self.n), rng.integers(0, self.n, 4096)])
        return np.unique(picked)

    def check(self, result: np.ndarray) -> Check:
        rows = self.check_rows()
        ref = self.reference(rows)
        scale = float(np.max(np.abs(ref))) or 1.0
        same_shape = np.shape(result) == ref.shape
        error = float(np.max(np.abs(np.asarray(result) - ref))) / scale if same_shape else float("inf")
        checked = f"all {self.n} elements" if rows is None else f"{len(rows)} elements (first, last 4096, 4096 random)"
        return Check(bool(error <= self.tolerance), error, self.tolerance, "max|out-ref|/max|ref|", checked)

    def notes(self, cache_bytes: int | None) -> dict[str, object]:
        """Each array against the device's last-level cache: STREAM's rule asks for 4x or more."""
        if not cache_bytes:
            return {"array_bytes": self.array_bytes(), "arrays_vs_cache": "last-level cache size unknown"}
        ratio = self.array_bytes() / cache_bytes
        out: dict[str, object] = {"array_bytes": self.array_bytes(), "array_vs_last_level_cache": ratio}
        if ratio < 4:
            out["stream_rule"] = (f"each array is {ratio:.2g}x the {cache_bytes / 2**20:.0f} MiB last-level cache, "
                                  "under STREAM's 4x: part of the traffic may be served by the cache")
        return out


@lru_cache(maxsize=2)
def _inputs(case: MembwCase) -> dict[str, np.ndarray]:
    return uniform_inputs(case.seed, {name: (case.n,) for name in INPUTS[case.kernel]}, case.dtype)


def expand(workload: Mapping[str, object], dtype: str, seed: int) -> Sequence[MembwCase]:
    """Every kernel at every size."""
    s = parse_section("workload", MembwSettings, workload)
    if dtype not in MEMBW_DTYPES:
        raise ConfigError("dtype", f"{dtype} is not a membw dtype (a STREAM kernel is elementwise: no tensor-core "
                          "precision applies)", ", ".join(MEMBW_DTYPES))
    if not s.kernels or not s.sizes:
        raise ConfigError("workload", "membw needs kernels and sizes", "workload.kernels=[triad] workload.sizes=[1024]")
    return [MembwCase(k, n, dtype, seed) for n in dict.fromkeys(s.sizes) for k in dict.fromkeys(s.kernels)]


def summarize(rows: list[dict[str, object]]) -> dict[str, object]:
    """The run's memory roof: its best timed bandwidth (the measured roof, as mamf's best matmul is the compute
    one), with the row it came from and its share of the datasheet's bandwidth where the row states one."""
    timed = [r for r in rows if r.get("status") == "ok" and r.get("timing_valid") and r.get("bandwidth_gbps")]
    if not timed:
        return {"achievable_gbps": None, "note": "no membw row was validly timed"}
    best = max(timed, key=lambda r: r["bandwidth_gbps"])
    roof = best.get("roofline") or {}
    peak = roof.get("peak_membw_gbps") if isinstance(roof, dict) else None
    return {"achievable_gbps": best["bandwidth_gbps"], "case_id": best["case_id"], "backend": best["backend"],
            "kernel": (best.get("params") or {}).get("kernel"), "dtype": best.get("dtype"),
            "device": best.get("device"), "peak_membw_gbps": peak,
            "of_peak": best["bandwidth_gbps"] / peak if peak else None,
            "method": "median time of the best case and backend; STREAM reports the fastest repeat"}
