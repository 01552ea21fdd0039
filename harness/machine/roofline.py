"""Where a row stands on the roofline, and the floor no honest time can be under.

The roofline model (Williams, Waterman & Patterson, "Roofline", CACM 52(4), 2009): a call of F FLOPs that must move
B bytes of DRAM traffic takes at least max(F / peak FLOP/s, B / memory bandwidth); its arithmetic intensity F / B
against the ridge point (peak FLOP/s / bandwidth) says which roof bounds it. `bytes` is the workload's own minimum
traffic for the case's shape (`Case.bytes_moved`: operands read once, results written once). That maximum is the
speed-of-light (SOL) time, the bound SOL-ExecBench scores kernels against (Lin et al., arXiv 2603.19173: analytic
SOL bounds of each problem on the part); a row's `sol_fraction` is SOL time / its median time (1 on the roofline),
the share of the speed of light it reaches, which is the bandwidth share for a memory-bound row.

The floor below which a time is not physical, and the row `invalid: faster than the roofline` (GPU MODE
reference-kernels PR #159's roofline floor, after times fabricated by patched timers and cached outputs on a live
leaderboard, issue #162): FLOOR_SHARE of max(F / peak, (B - last-level cache) / bandwidth) over the roofs known. The
cache is taken off the bytes because data the call finds in a cache warm from the call before never crosses DRAM;
the share leaves room for a part that boosts above the clock its datasheet peak assumes (H100 SXM5: tensor peaks at
1830 MHz, max boost 1980 MHz, peaks.yaml) and for a CPU estimate made at its base clock. The floor's compute term
counts the FLOPs no kernel can do without (`floor_flops`, the case's `min_flops`), where a convention credits more
(attention's fa2 count, a causal mask as half of seq_q x seq_kv, credits a short top-left query block up to
seq_kv / seq_q times its work). Only the peak table's roofs set a floor: a roof given as an override is the user's
figure, which may be below the part's (it still sets the SOL figures). A case the DRAM roofline does not bound (a
collective: its links do) is not placed (`off_roofline` says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from xmfu.harness.machine.peaks import BandwidthPeak, Peak

FLOOR_SHARE = 0.5  # GPU MODE's #159 rejects times under 1e-3 of a bound from B200's highest published ceilings; a
# bound from the row's own count and its device's datasheet can be tighter, and a replayed, deferred or mistimed call
# reads 10-1000x under it
INVALID = "invalid: faster than the roofline"
OVERRIDE = "override"  # the peak entry of a roof given in the config (peaks.lookup, lookup_membw)


@dataclass(frozen=True)
class Roofs:
    """The device's roofs for one dtype: the datasheet (or override) compute peak, memory bandwidth, last-level
    cache."""

    peak: Peak
    membw: BandwidthPeak
    cache_bytes: int | None


@dataclass(frozen=True)
class Work:
    """What one call of a case must do: its FLOPs as its convention counts them, its minimum DRAM traffic, the
    fewest FLOPs any kernel needs for it (None: `flops`), and why it is off the roofline (None: on it)."""

    flops: float
    bytes: float
    floor_flops: float | None = None
    off_roofline: str | None = None

    @classmethod
    def of(cls, case: Any) -> Work:
        """A case's work through its formulas; `min_flops` and `off_roofline` are optional case methods (floor_flops
        is None where min_flops is the count itself)."""
        least, off = getattr(case, "min_flops", None), getattr(case, "off_roofline", None)
        flops, fewest = case.flops(), least() if least is not None else None
        return cls(flops, case.bytes_moved(), fewest if fewest is not None and fewest != flops else None,
                   off() if off is not None else None)


def _terms(flops: float, nbytes: float, roofs: Roofs) -> tuple[float | None, float | None]:
    """(compute time, memory time) at the roofs; 0 for no work of that kind, None where its roof is unknown."""
    compute = 0.0 if flops <= 0 else flops / (roofs.peak.tflops * 1e12) if roofs.peak.tflops else None
    memory = 0.0 if nbytes <= 0 else nbytes / (roofs.membw.gbps * 1e9) if roofs.membw.gbps else None
    return compute, memory


def _bound(compute: float | None, memory: float | None) -> str | None:
    if compute is None or memory is None:
        return "compute" if memory == 0 else "memory" if compute == 0 else None
    return "compute" if compute >= memory else "memory"


def _floor(work: Work, roofs: Roofs) -> float | None:
    """FLOOR_SHARE of the time the peak table's roofs allow the work's least FLOPs and its traffic a warm last-level
    cache cannot hold; None without such a roof."""
    least = work.flops if work.floor_flops is None else work.floor_flops
    peak = roofs.peak.tflops if roofs.peak.entry != OVERRIDE else None
    bw = roofs.membw.gbps if roofs.membw.entry != OVERRIDE else None
    uncached = max(0.0, work.bytes - (roofs.cache_bytes or 0))
    known = [t for t in (least / (peak * 1e12) if peak and least > 0 else None,
                         uncached / (bw * 1e9) if bw and uncached > 0 else None) if t is not None]
    return FLOOR_SHARE * max(known) if known else None


def _note(work: Work, roofs: Roofs, compute: float | None, memory: float | None) -> str | None:
    missing = []
    if compute is None:
        missing.append(f"no compute roof ({roofs.peak.note})")
    if memory is None:
        missing.append(f"no memory roof ({roofs.membw.note})")
    if work.bytes <= 0 < work.flops:
        missing.append("the workload states no minimum traffic for this case: placed under the compute roof only")
    return "; ".join(missing) or None


def place(work: Work, roofs: Roofs, median: float | None) -> dict[str, Any]:
    """The row's `roofline` record (results/schema/parts.py Roofline); `median`: its time, None when not timed."""
    peak, bw = roofs.peak.tflops, roofs.membw.gbps
    common = {"bytes": work.bytes, "peak_tflops": peak, "peak_membw_gbps": bw, "membw_entry": roofs.membw.entry,
              "membw_source": roofs.membw.source, "ridge": peak * 1e3 / bw if peak and bw else None,
              "cache_bytes": roofs.cache_bytes, "floor_flops": work.floor_flops, "floor_share": FLOOR_SHARE,
              "off_roofline": work.off_roofline}
    if work.off_roofline:
        return {**common, "intensity": None, "bound": None, "compute_s": None, "memory_s": None, "sol_s": None,
                "sol_fraction": None, "floor_s": None, "note": work.off_roofline}
    compute, memory = _terms(work.flops, work.bytes, roofs)
    sol = max(compute, memory) if compute is not None and memory is not None else None
    return {**common, "intensity": work.flops / work.bytes if work.bytes > 0 else None,
            "bound": _bound(compute, memory), "compute_s": compute, "memory_s": memory, "sol_s": sol or None,
            "sol_fraction": sol / median if sol and median else None, "floor_s": _floor(work, roofs),
            "note": _note(work, roofs, compute, memory)}


def faster_than_roofline(record: dict[str, Any], median: float) -> str | None:
    """The row's reason when its median time is under the floor; None otherwise."""
    floor = record.get("floor_s")
    if floor is None or median >= floor:
        return None
    roofs = ", ".join(f"{value:.4g} {unit}" for unit, value in (("TFLOP/s", record["peak_tflops"]),
                                                                 ("GB/s", record["peak_membw_gbps"])) if value)
    return (f"{INVALID}: median {median:.4g} s is under the floor {floor:.4g} s ({FLOOR_SHARE:g} x the time the "
            f"roofs allow: {roofs}): the time is not physical (a replayed or deferred output, or a wrong timer)")


def median_of(samples: list[float], repeats: list[int]) -> float:
    """The row's median time as results/statistics/summary.summarize states it: over two or more repeats, the median
    of each repeat's median."""
    ids = sorted(set(repeats))
    if len(ids) > 1 and len(repeats) == len(samples):
        return float(np.median([np.median([v for v, r in zip(samples, repeats, strict=True) if r == i])
                                for i in ids]))
    return float(np.median(samples))
