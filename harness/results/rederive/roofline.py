"""A row's `roofline` record re-derived (harness/machine/roofline.py is the run's own function): its figures from the
row's FLOPs, bytes, peak and median, the peak table's memory bandwidth and the recorded device's cache; its floor's
verdict both ways; and its floor_flops and off_roofline against what the workload's formulas give."""

from __future__ import annotations

from typing import Any

from xmfu.harness.machine.peaks import BandwidthPeak, Peak, lookup_membw
from xmfu.harness.machine.roofline import INVALID, Roofs, Work, median_of, place
from xmfu.harness.results.rederive.row_checks import memoized, recorded_device
from xmfu.harness.results.rederive.times import is_number, same

ROOFLINE_WORK = "roofline_work"  # a Restated figure (no row key): the record's floor_flops and off_roofline
ROOFLINE_FIGURES = ("intensity", "ridge", "compute_s", "memory_s", "sol_s", "sol_fraction", "floor_s", "floor_share",
                    "bound")


def roofline_problems(row: dict[str, Any], rec: dict[str, Any] | None, devices: list[dict[str, Any]],
                      membw_override: float | None, where: str, memo: dict[Any, Any] | None = None) -> list[str]:
    """The row's `roofline` record re-derived by the run's own function (machine/roofline.place) from the row's FLOPs,
    bytes, peak and median, the peak table's memory bandwidth and the recorded device's cache; and its floor's
    verdict: an ok row timed under it, or a row failed as under it whose samples are not, is a forgery. The record's
    floor_flops and off_roofline are the workload's formulas' (restated_problems checks them where formulas were
    handed over). A row without the record was written before it was recorded."""
    r = row.get("roofline")
    if not isinstance(r, dict):
        return []
    out = [f"{where}: roofline.{k} {r.get(k)!r} is not the row's {k} {row.get(k)!r}" for k in ("bytes", "peak_tflops")
           if not same(r.get(k), row.get(k))]
    index = row.get("device_index", 0)
    device = memoized(memo, ("device", type(index), index), lambda: recorded_device(row, devices))
    if device is not None:
        bw = memoized(memo, ("membw", type(index), index), lambda: lookup_membw(device, override=membw_override))
        if not same(r.get("peak_membw_gbps"), bw.gbps) or r.get("membw_entry") != bw.entry \
                or r.get("cache_bytes") != device.cache_bytes:
            out.append(f"{where}: roofline roofs {r.get('peak_membw_gbps')} GB/s ({r.get('membw_entry')}), cache "
                       f"{r.get('cache_bytes')} B are not the recorded device's ({bw.gbps} GB/s from "
                       f"{bw.entry or bw.note}, cache {device.cache_bytes} B)")
    least = r.get("floor_flops")
    if least is not None and not (is_number(least) and is_number(row.get("flops")) and 0 <= least <= row["flops"]):
        out.append(f"{where}: roofline.floor_flops {least!r} is not between 0 and the row's flops {row.get('flops')!r}")
    if out or not all(is_number(row.get(k)) for k in ("flops", "bytes")):
        return out
    t = row.get("time_s") if isinstance(row.get("time_s"), dict) else {}
    median = t.get("median") if row.get("status") == "ok" and row.get("timing_valid") is True else None
    peak, bw, cache = (r.get(k) if is_number(r.get(k)) and r[k] > 0 else None
                       for k in ("peak_tflops", "peak_membw_gbps", "cache_bytes"))
    stated = (peak, row.get("peak_entry"), bw, r.get("membw_entry"), cache)  # a bundle's rows share a few
    roofs = memoized(memo, ("roofs", *map(type, stated), *stated), lambda: _roofs(*stated))
    off = r.get("off_roofline") if isinstance(r.get("off_roofline"), str) else None
    want = place(Work(row["flops"], row["bytes"], least, off), roofs, median if is_number(median) else None)
    if any(r.get(k) != want[k] for k in ROOFLINE_FIGURES):  # equal as Python compares: `same` too (most rows)
        out += [f"{where}: roofline.{k} {r.get(k)!r} is not what the roofline gives ({want[k]!r})"
                for k in ROOFLINE_FIGURES if not same(r.get(k), want[k])]
    return out + _floor_problems(row, rec, want["floor_s"], median, where)


def _roofs(peak: float | None, peak_entry: Any, bw: float | None, membw_entry: Any, cache: float | None) -> Roofs:
    """The roofs a row's record states, as machine/roofline.place takes them."""
    return Roofs(Peak(peak, None, peak_entry, ""), BandwidthPeak(bw, None, membw_entry, ""),
                 int(cache) if cache else None)


def _floor_problems(row: dict[str, Any], rec: dict[str, Any] | None, floor: float | None, median: Any,
                    where: str) -> list[str]:
    """An ok row's median under the floor; a row failed as under it whose samples' median is not."""
    if floor is None:
        return []
    if is_number(median) and median < floor:
        return [f"{where}: status ok with a median of {median} s, under the roofline's floor {floor} s: not physical"]
    said = str(row.get("reason") or "").startswith(INVALID)
    samples = (rec or {}).get("samples") or []
    if said and samples and all(is_number(v) for v in samples):
        found = median_of(samples, (rec or {}).get("repeats") or [])
        if found >= floor:
            return [f"{where}: failed as {INVALID!r}, but its samples' median {found} s is not under the floor "
                    f"{floor} s"]
    return []


def roofline_work_problems(row: dict[str, Any], want: dict[str, Any] | None, where: str) -> list[str]:
    """The record's floor_flops and off_roofline against what the workload's formulas give (machine/roofline Work:
    the Restated figure ROOFLINE_WORK, None where the formulas gave none)."""
    r = row.get("roofline")
    if not isinstance(r, dict) or not isinstance(want, dict):
        return []
    return [f"{where}: roofline.{k} {r.get(k)!r} is not what the {row.get('workload')} workload's formulas give "
            f"({value!r})" for k, value in want.items() if not same(r.get(k), value)]
