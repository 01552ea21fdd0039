"""Matmul C = op(A) @ op(B): shapes, FLOP and byte formulas, seeded inputs and the fp64 reference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from xmfu.harness.engine.case import Check
from xmfu.harness.engine.declare import POSITIVE_INT, ConfigError, setting
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.dtypes import DTYPES, uniform_inputs
from xmfu.harness.machine.peaks import device_fp8_format, match_device
from xmfu.harness.machine.platform import DeviceInfo

FLOP_CONVENTION = "matmul-2mnk/1"
FULL_CHECK_LIMIT = 2**33  # m*n*k above this: compare edge and sampled rows instead of every row
# Error metric: max |C - C_ref| / max |C_ref|, with C_ref computed in fp64 from the same (rounded) inputs.
# Bounds: output rounding (bf16 unit roundoff 2^-8, fp16 2^-11) plus accumulation-order error. The fp32
# bound sits well below TF32's input rounding (~1e-4 on this metric), so a backend that silently uses TF32
# for "fp32" is reported incorrect instead of fast.
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 1.6e-2, "fp16": 2e-3}
# fp8 by the format the inputs were rounded to. They are exact in it (the reference uses the same rounded values),
# so what remains is the bf16 output's rounding plus accumulation order, as for bf16: the same bound for both.
FP8_TOLERANCE = {"e4m3fn": 1.6e-2, "e4m3fnuz": 1.6e-2, "e5m2": 1.6e-2}
DEFAULT_SIZES = (2048, 4096, 8192)
# fp8 operands as every fp8 backend holds them for its timed calls, whatever the case stores: A row-major and B
# K-major, i.e. B held as (N, K) row-major and used transposed. The one layout cuBLASLt's fp8 GEMM takes (TN):
# torch._scaled_mm asks B column-major, and XLA's GemmRewriter otherwise puts a transpose of B before its
# __cublas$lt$matmul$f8 call, inside the timed program (xla gemm_rewrite_test.cc, the fp8 cases' CHECK lines). For
# Triton it is the layout its fp8 tutorial pre-transposes B to (triton-lang/triton#3546: wgmma reads an fp8 operand
# from shared memory K-major only, "In MMAV3 transpose is only supported for f16 and bf16").
FP8_LAYOUT = "A (M, K) row-major, B K-major (held (N, K) row-major, used transposed)"


@dataclass(frozen=True)
class MatmulSettings:
    """`workload=matmul`: C = op(A) @ op(B), FLOPs 2*M*N*K. Square `sizes` and explicit `shapes` [M, N, K] are both
    run."""

    name: str = setting("matmul", "the workload")
    sizes: tuple[int, ...] | None = setting(None, f"square sizes; null: {list(DEFAULT_SIZES)}, unless shapes are "
                                            "named (they then replace them)", POSITIVE_INT)
    shapes: Any = setting((), "[M, N, K] shapes, e.g. [[4096,4096,1024]]", POSITIVE_INT)
    transpose_a: bool = setting(False, "A stored (K, M), used transposed")
    transpose_b: bool = setting(False, "B stored (N, K), used transposed")


@dataclass(frozen=True)
class MatmulCase:
    m: int
    n: int
    k: int
    dtype: str
    transpose_a: bool = MatmulSettings.transpose_a  # A stored as (K, M) and used transposed
    transpose_b: bool = MatmulSettings.transpose_b  # B stored as (N, K) and used transposed
    seed: int = 0
    fp8_format: str | None = None  # fp8 only: the device's fp8 format (set by for_device), inputs rounded to it

    workload: ClassVar[str] = "matmul"
    flop_convention: ClassVar[str] = FLOP_CONVENTION

    @property
    def case_id(self) -> str:
        layout = ("T" if self.transpose_a else "N") + ("T" if self.transpose_b else "N")
        return f"matmul-{self.dtype}-{self.m}x{self.n}x{self.k}-{layout}"

    def params(self) -> dict[str, Any]:
        out = {"m": self.m, "n": self.n, "k": self.k, "transpose_a": self.transpose_a,
               "transpose_b": self.transpose_b}
        return {**out, "fp8_format": self.fp8_format} if self.dtype == "fp8" else out

    @property
    def tolerance(self) -> float:
        return FP8_TOLERANCE[self.fp8_format] if self.dtype == "fp8" else TOLERANCE[self.dtype]

    def flops(self) -> float:
        # One multiply-add = 2 FLOPs; M*N outputs each need K of them (epilogue not counted). Same count as
        # torch.utils.flop_counter and XLA cost_analysis for dot.
        return 2.0 * self.m * self.n * self.k

    def input_bytes(self) -> float:
        return float((self.m * self.k + self.k * self.n) * DTYPES[self.dtype].itemsize)

    def bytes_moved(self) -> float:
        # Compulsory traffic: read A and B once, write C once (the roofline model's minimum).
        return self.input_bytes() + self.m * self.n * DTYPES[self.dtype].output_itemsize

    def memory_bytes(self) -> float:
        """The least memory a backend's run of this case holds at once (harness/engine/cost.py): its A, B and C, and
        the host's float32 stored inputs and their float64 copies, which the check keeps beside them."""
        return self.bytes_moved() + (self.m * self.k + self.k * self.n) * (4 + 8)

    def inputs(self) -> dict[str, np.ndarray]:
        """The operands as C = A @ B uses them, `a` (M, K) and `b` (K, N): float32 arrays rounded to the dtype (a
        plug-in's view; where transpose_a/transpose_b store them transposed, these are transposed views of
        `stored_inputs`, which a backend that tests the library's layout flags uses instead)."""
        a, b = _stored_inputs(self)
        return {"a": a.T if self.transpose_a else a, "b": b.T if self.transpose_b else b}

    def stored_inputs(self) -> tuple[np.ndarray, np.ndarray]:
        """A and B as float32 arrays in their stored layout (transposed storage where asked)."""
        return _stored_inputs(self)

    def operands(self) -> Operands:
        """A and B as a backend holds them for its timed calls: as stored, except fp8 (FP8_LAYOUT)."""
        a, b = _stored_inputs(self)
        if self.dtype != "fp8":
            return Operands(a, b, self.transpose_a, self.transpose_b, None)
        a = np.ascontiguousarray(a.T) if self.transpose_a else a
        b = b if self.transpose_b else np.ascontiguousarray(b.T)
        stored = f"A {'(K, M)' if self.transpose_a else '(M, K)'}, B {'(N, K)' if self.transpose_b else '(K, N)'}"
        moved = self.transpose_a or not self.transpose_b
        note = FP8_LAYOUT + (f"; the case stores {stored}, relaid out at set-up (untimed)" if moved else "")
        return Operands(a, b, False, True, note)

    def check_rows(self) -> np.ndarray | None:
        if self.m * self.n * self.k <= FULL_CHECK_LIMIT:
            return None
        # Edge rows catch boundary-tile bugs; seeded random rows catch the rest.
        rng = np.random.default_rng(self.seed + 1)
        picked = np.concatenate([np.arange(16), np.arange(self.m - 16, self.m), rng.integers(0, self.m, 32)])
        return np.unique(np.clip(picked, 0, self.m - 1))

    def check(self, rows: np.ndarray) -> Check:
        a, b = _operands64(self)
        selected = self.check_rows()
        ref = (a if selected is None else a[selected]) @ b
        scale = float(np.max(np.abs(ref))) or 1.0
        error = float(np.max(np.abs(rows - ref))) / scale if rows.shape == ref.shape else float("inf")
        checked = (f"all {self.m}x{self.n} outputs" if selected is None
                   else f"{len(selected)} rows (first 16, last 16, 32 random) of {self.m}")
        if self.dtype == "fp8":
            checked += f", inputs in {self.fp8_format}"
        return Check(error <= self.tolerance, error, self.tolerance, "max|C-Cref|/max|Cref|", checked)


@dataclass(frozen=True)
class Operands:
    """A and B as float32 arrays, each used transposed where its flag says so; fp8_layout: the row's note (fp8)."""

    a: np.ndarray
    b: np.ndarray
    transpose_a: bool
    transpose_b: bool
    fp8_layout: str | None

    def used(self, a: Any, b: Any) -> tuple[Any, Any]:
        """`a` and `b` (these arrays as any framework's tensors) as op(A), op(B): transposed views where flagged."""
        return (a.T if self.transpose_a else a), (b.T if self.transpose_b else b)


@lru_cache(maxsize=1)
def _stored_inputs(case: MatmulCase) -> tuple[np.ndarray, np.ndarray]:
    a_shape = (case.k, case.m) if case.transpose_a else (case.m, case.k)
    b_shape = (case.n, case.k) if case.transpose_b else (case.k, case.n)
    x = uniform_inputs(case.seed, {"a": a_shape, "b": b_shape}, case.dtype, case.fp8_format)
    return x["a"], x["b"]


@lru_cache(maxsize=1)
def _operands64(case: MatmulCase) -> tuple[np.ndarray, np.ndarray]:
    a, b = _stored_inputs(case)
    a, b = (a.T if case.transpose_a else a), (b.T if case.transpose_b else b)
    return a.astype(np.float64), b.astype(np.float64)


def _shapes(s: MatmulSettings) -> list[tuple[int, int, int]]:
    """`sizes` null means the default squares, unless `shapes` are named: naming shapes replaces them."""
    sizes = s.sizes if s.sizes is not None else () if s.shapes else DEFAULT_SIZES
    shapes = [(n, n, n) for n in sizes]
    for i, dims in enumerate(s.shapes):
        if not isinstance(dims, (list, tuple)) or len(dims) != 3:
            raise ConfigError(f"workload.shapes[{i}]", f"{dims!r} is not [M, N, K]", "three positive integers")
        shapes.append((dims[0], dims[1], dims[2]))
    if not shapes:
        raise ConfigError("workload", "matmul needs sizes or shapes", "workload.sizes=[2048] or "
                          "workload.shapes=[[4096,4096,1024]]")
    return list(dict.fromkeys(shapes))


def expand(workload: Mapping[str, Any], dtype: str, seed: int) -> Sequence[MatmulCase]:
    """The cases of a matmul config: square `sizes` and explicit `shapes` [M, N, K]."""
    s = parse_section("workload", MatmulSettings, workload)
    return [MatmulCase(m, n, k, dtype, s.transpose_a, s.transpose_b, seed) for m, n, k in _shapes(s)]


def fp8_gemm_refused(case: MatmulCase, kind: str, device: DeviceInfo, *, engine: str, min_cc: tuple[int, int],
                     amd_arches: tuple[str, ...]) -> str | None:
    """Why `engine` cannot run this fp8 case as an fp8 GEMM on `device`, or None: NVIDIA below `min_cc`, an AMD part
    outside `amd_arches` (each backend names its own, from its compiler's source), or a case in another e4m3 variant
    than the device's (machine/dtypes.fp8_format). A CPU passes: Triton's interpreter and XLA's CPU dot check it."""
    arch = (device.arch or "").split(":")[0]
    cc = device.compute_capability
    if kind == "cuda" and cc is not None and tuple(int(x) for x in cc.split(".")) < min_cc:
        return (f"{engine} runs fp8 as an fp8 GEMM from NVIDIA compute capability {min_cc[0]}.{min_cc[1]}; "
                f"this device is {cc}")
    if kind == "rocm" and arch not in amd_arches:
        return (f"{engine} runs fp8 as an fp8 GEMM on AMD {'/'.join(amd_arches)} only; "
                f"this device is {arch or 'unknown'}")
    return fp8_mismatch(case, kind, device)


def fp8_mismatch(case: MatmulCase, kind: str, device: DeviceInfo) -> str | None:
    """Why an fp8 case's inputs are not in the format `device` takes (machine/peaks.device_fp8_format), or None."""
    wanted = device_fp8_format(device, kind)
    if wanted is None:
        return f"this device takes fp8 only as {_listed(device)}, which xmfu cannot make inputs in"
    if case.fp8_format != wanted:
        return f"fp8 case has format {case.fp8_format or 'none'}; this device's fp8 is {wanted}"
    return None


def _listed(device: DeviceInfo) -> str:
    entry, _ = match_device(device)
    return ", ".join((entry or {}).get("fp8_formats") or []) or "formats xmfu does not know"


def for_device(cases: Sequence[MatmulCase], device: DeviceInfo) -> list[MatmulCase]:
    """The cases as `device` runs them: fp8 cases take the device's fp8 format (machine/peaks.device_fp8_format)."""
    fmt = device_fp8_format(device)
    return [replace(c, fp8_format=fmt) if c.dtype == "fp8" else c for c in cases]
