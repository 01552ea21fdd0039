"""Datasheet peaks from peaks.yaml, looked up for a detected device: dense FLOP/s per dtype (`lookup`) and
memory bandwidth (`lookup_membw`).

An unknown or ambiguous device gives None with the reason; nothing here ever falls back to another device's
figure (a silent fallback is how public tools came to report MFU above 100%).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from xmfu.harness.machine.dtypes import fp8_format
from xmfu.harness.machine.platform import DeviceInfo

PEAKS_FILE = Path(__file__).with_name("peaks.yaml")
MEMORY_TOLERANCE = 0.12  # reported memory (GiB vs GB, reserved areas) differs from the marketing figure


@dataclass(frozen=True)
class Peak:
    tflops: float | None
    source: str | None  # where the number came from; None when there is no number
    entry: str | None  # peak-table id, "cpu-estimate" or "override"
    note: str  # why tflops is None, or how the number was derived / scaled
    clock_mhz: float | None = None  # the clock the peak assumes (for clock-adjusted MFU)

    def as_row(self) -> dict[str, Any]:
        return {"peak_tflops": self.tflops, "peak_source": self.source, "peak_entry": self.entry,
                "peak_note": self.note}


@dataclass(frozen=True)
class BandwidthPeak:
    """Peak memory bandwidth in GB/s (1e9 B/s), the denominator of a memory-bandwidth utilisation."""

    gbps: float | None
    source: str | None
    entry: str | None  # peak-table id or "override"
    note: str  # why gbps is None

    def as_row(self) -> dict[str, Any]:
        return {"peak_membw_gbps": self.gbps, "peak_membw_source": self.source, "peak_membw_entry": self.entry,
                "peak_membw_note": self.note}


@dataclass(frozen=True)
class Tdp:
    """A part's board power (TDP / TGP / total board power), W: the denominator of `energy.tdp_fraction`."""

    w: float | None
    source: str | None  # the document read and where; None when there is no figure
    note: str | None  # why w is None; None when there is a figure


def check_tdp(entry: dict[str, Any]) -> None:
    """An entry's `tdp` block is a positive W with the document, its address and the words read, which state the
    figure; a range is [low, high] with w its upper bound. ValueError names what is wrong: a figure without its
    source is not one xmfu may divide by."""
    tdp = entry.get("tdp")
    if tdp is None:
        return
    where = f"peaks.yaml entry {entry.get('id')!r}: tdp"
    w = tdp.get("w") if isinstance(tdp, dict) else None
    if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w <= 0:
        raise ValueError(f"{where}.w is {w!r}: a positive number of W is required")
    for key in ("source", "url", "read"):
        if not isinstance(tdp.get(key), str) or not tdp[key].strip():
            raise ValueError(f"{where}.{key} is missing: a TDP needs the document, its address and the words read")
    if not re.search(rf"(?<![\d.]){w:g}(?![\d.])", tdp["read"].replace(",", "")):
        raise ValueError(f"{where}.read does not state {w:g} W: the words read must give the figure")
    span = tdp.get("range_w")
    if span is not None and not (isinstance(span, list) and len(span) == 2
                                 and all(isinstance(x, (int, float)) and x > 0 for x in span)
                                 and span[0] < span[1] == w):
        raise ValueError(f"{where}.range_w is {span!r}: [low, high] in W with high == w is required")


# The table is xmfu's own file, read by every command that judges a row: libyaml's loader where PyYAML has it (the
# pure-Python loader took 0.1 s of CPU for it, a fifth of a small `xmfu compare`); both read it alike
# (tests/machine: test_libyaml_reads_the_peak_table_as_the_pure_loader_does).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=4)
def load_table(path: Path = PEAKS_FILE) -> dict[str, Any]:
    data = yaml.load(path.read_text(), Loader=_LOADER)  # a safe loader (SafeLoader's constructor)
    for entry in data["devices"]:
        check_tdp(entry)
    data["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return data


def _span(entry: dict[str, Any], name: str) -> tuple[int, int] | None:
    """Where in `name` the entry's longest pattern match lies, or None."""
    spans = [m.span() for p in entry["names"] if (m := re.search(p, name, re.IGNORECASE))]
    return max(spans, key=lambda s: s[1] - s[0], default=None)


def _by_name(entries: list[dict[str, Any]], name: str, units: int | None) -> tuple[dict | None, str]:
    """The one entry `name` designates, or None with why (no match, or several parts named)."""
    scored = [(span, e) for e in entries if (span := _span(e, name))]
    exact = [(span, e) for span, e in scored if e.get("multiprocessors") == units]
    scored = exact or scored  # "MI250X/MI250" names two parts: the SM/CU count decides first
    if not scored:
        return None, ""
    (start, end), best = max(scored, key=lambda se: se[0][1] - se[0][0])
    # The longest match wins only over shorter matches inside it (a more specific reading of the same words);
    # a match elsewhere in the name, or one as long, is another part the name could be.
    rivals = [e for (s, t), e in scored if e is not best and not (start <= s and t <= end and t - s < end - start)]
    if not rivals:
        return best, f"name {name!r} matched {best['id']}"
    ids = ", ".join(e["id"] for e in [best, *rivals])
    return None, f"device name {name!r} is ambiguous between {ids} and the SM/CU count ({units}) does not decide"


@lru_cache(maxsize=256)
def _by_name_in_table(name: str, units: int | None) -> tuple[dict | None, str]:
    """`_by_name` in xmfu's own table (load_table(), read once per process), remembered per (name, units): every
    pattern of every entry is searched per call, and `xmfu validate` asks once per row (4,800 rows: 3 s of a
    200-bundle report, issue 30 item 14)."""
    return _by_name(load_table()["devices"], name, units)


def _by_arch(entries: list[dict[str, Any]], device: DeviceInfo) -> list[dict[str, Any]]:
    """ROCm fallback when the marketing name matched nothing: gcnArchName + CU count + memory."""
    if not device.arch or device.memory_bytes is None:
        return []
    arch = device.arch.split(":")[0]
    found = []
    for e in entries:
        if e.get("arch") != arch or e.get("multiprocessors") != device.multiprocessors:
            continue
        if abs(device.memory_bytes / 1e9 / e["memory_gb"] - 1) <= MEMORY_TOLERANCE:
            found.append(e)
    return found


def match_device(device: DeviceInfo, table: dict[str, Any] | None = None) -> tuple[dict | None, str]:
    """The peak-table entry for `device`, or None with the reason."""
    entries = (table or load_table())["devices"]
    name = device.jax_device_kind or device.name
    units = device.multiprocessors
    entry, why = _by_name(entries, name, units) if table else _by_name_in_table(name, units)
    if entry is not None or why:
        return entry, why
    by_arch = _by_arch(entries, device)
    if len(by_arch) == 1:
        return by_arch[0], f"arch {device.arch} with {device.multiprocessors} CUs matched {by_arch[0]['id']}"
    return None, f"device {name!r} is not in xmfu's peak table (harness/machine/peaks.yaml)"


def device_fp8_format(device: DeviceInfo, kind: str | None = None) -> str | None:
    """The fp8 format `device` takes (machine/dtypes.fp8_format): its peak-table entry's `fp8_formats` where it lists
    them (Trainium), else the platform's rule; None where the part takes no format xmfu can make inputs in."""
    entry, _ = match_device(device)
    formats = (entry or {}).get("fp8_formats")
    return fp8_format(kind or device.kind, device.arch, formats)


def _scale(entry: dict[str, Any], device: DeviceInfo) -> tuple[float | None, str]:
    full = entry.get("multiprocessors")
    seen = device.multiprocessors
    if not full or not seen or seen == full:
        return 1.0, ""
    if seen > full:
        return None, (f"device reports {seen} SMs/CUs but {entry['id']} has {full}: "
                      "the name match is wrong or the table is; MFU withheld")
    return seen / full, f"scaled by {seen}/{full} visible SMs/CUs (MIG slice or partition)"


def cpu_peak(device: DeviceInfo, dtype: str, clock_ghz: float | None = None) -> Peak:
    """Estimate: physical cores in use x clock x FLOPs/cycle/core for the best ISA present."""
    rules = load_table()["cpu"]
    if dtype in rules["unsupported"]:
        return Peak(None, None, None, rules["unsupported"][dtype])
    facts = device.cpu
    flags = set(facts.get("flags", ()))
    clock, clock_source = (clock_ghz, "config cpu_clock_ghz") if clock_ghz else (
        facts.get("clock_ghz"), facts.get("clock_source", ""))
    if not clock:
        return Peak(None, None, None, "no CPU clock could be read; set cpu_clock_ghz=<GHz>")
    used = dtype
    rule = next((r for r in rules["flops_per_cycle"].get(dtype, []) if flags.issuperset(r["flags"])), None)
    if rule is None and dtype in rules["fallback"]:
        used = rules["fallback"][dtype]
        rule = next((r for r in rules["flops_per_cycle"][used] if flags.issuperset(r["flags"])), None)
    if rule is None:
        return Peak(None, None, None, f"no {dtype} vector ISA recognised in the CPU flags")
    cores = int(facts.get("physical_cores") or device.multiprocessors or 1)
    tflops = cores * clock * 1e9 * rule["value"] / 1e12
    note = (f"{cores} cores x {clock:.3f} GHz ({clock_source}) x {rule['value']} FLOPs/cycle ({rule['note']})"
            + (f"; no native {dtype}: {used} rate" if used != dtype else ""))
    return Peak(tflops, rules["source"], "cpu-estimate", note, clock * 1e3)


def lookup(device: DeviceInfo, dtype: str, *, override: float | None = None,
           cpu_clock_ghz: float | None = None) -> Peak:
    """Peak dense TFLOP/s of `device` for `dtype`, or None with the reason."""
    if override is not None:
        return Peak(override, f"config override peak_tflops={override:g}", "override", "")
    if device.kind == "cpu":
        return cpu_peak(device, dtype, cpu_clock_ghz)
    entry, why = match_device(device)
    if entry is None:
        return Peak(None, None, None, f"{why}; pass peak_tflops=<dense TFLOP/s> to set one")
    if "per_neuroncore" in entry:
        return neuroncore_peak(entry, device, dtype)
    value = entry["tflops"].get(dtype)
    if value is None:
        return Peak(None, None, entry["id"], f"{entry['id']} has no published dense {dtype} peak")
    factor, note = _scale(entry, device)
    if factor is None:
        return Peak(None, None, entry["id"], note)
    confidence = " (low confidence)" if entry.get("confidence") == "low" else ""
    tflops = value * factor
    return Peak(tflops if math.isfinite(tflops) else None, entry["source"] + confidence, entry["id"], note,
                peak_clock_mhz(entry, dtype))


def neuron_unit(entry: dict[str, Any], device: DeviceInfo) -> tuple[int | None, str]:
    """How many physical NeuronCores `device` spans (its LNC degree, or the whole chip), or None with why.

    A torch device on Neuron is one logical NeuronCore of NEURON_LOGICAL_NC_CONFIG physical cores (peaks.yaml,
    the Trainium section); the device reports that count as `multiprocessors`."""
    cores, degree = entry["neuroncores"], device.multiprocessors
    if degree is None:
        return None, (f"{entry['id']}: how many physical NeuronCores this device spans (the logical-core setting, "
                      "LNC) is unknown, and a logical core's peak depends on it")
    if degree != cores and degree not in entry.get("lnc", ()):
        allowed = ", ".join(str(n) for n in entry.get("lnc", ()))
        return None, (f"device spans {degree} physical NeuronCores but {entry['id']} takes LNC={allowed} "
                      f"(or the whole chip, {cores}): the name match is wrong or the table is; MFU withheld")
    return degree, ""


def neuroncore_peak(entry: dict[str, Any], device: DeviceInfo, dtype: str) -> Peak:
    """A Trainium device's peak: the per-NeuronCore figure AWS's NeuronCore pages define x the physical cores it
    spans (LNC=1 or 2), recorded in the note as the unit of "device"; the whole chip gets the chip page's figure.
    The two disagree (Trainium2: 8 x 79 = 632 vs 667 BF16), which the note says."""
    degree, why = neuron_unit(entry, device)
    if degree is None:
        return Peak(None, None, entry["id"], why)
    chip = entry["tflops"].get(dtype)
    if degree == entry["neuroncores"]:
        if chip is None:
            return Peak(None, None, entry["id"], f"{entry['id']} has no published dense {dtype} peak")
        return Peak(chip, entry["source"], entry["id"], f"device = the whole chip ({degree} NeuronCores)")
    per_core = entry["per_neuroncore"]
    value = per_core["tflops"].get(dtype)
    if value is None:
        return Peak(None, None, entry["id"], f"{entry['id']} has no published dense {dtype} peak per NeuronCore")
    note = (f"device = one logical NeuronCore, LNC={degree} ({degree} physical NeuronCore(s) sharing HBM): "
            f"{degree} x {value:g} TFLOP/s per core")
    share = None if chip is None else chip / entry["neuroncores"]
    if share is not None and abs(share / value - 1) > 0.01:
        note += f"; the chip page's {chip:g} / {entry['neuroncores']} = {share:.4g} per core differs"
    if dtype == "fp8" and entry.get("fp8_formats"):
        note += f"; fp8 as the device takes it: {', '.join(entry['fp8_formats'])}"
    return Peak(value * degree, per_core["source"], entry["id"], note)


def peak_clock_mhz(entry: dict[str, Any], dtype: str) -> float | None:
    """The clock `entry`'s `dtype` peak was computed at: Hopper's fp32 vector peak is at the max boost clock
    (1980 MHz on H100 SXM5), its tensor peaks at 1830 MHz, so one clock for every dtype would put fp32's
    clock-adjusted MFU 7.6% low (peaks.yaml `dtype_clock_mhz`)."""
    return (entry.get("dtype_clock_mhz") or {}).get(dtype, entry.get("boost_clock_mhz"))


CPU_MEMBW_NOTE = "no published peak memory bandwidth for a CPU; pass peak_membw_gbps="


def lookup_membw(device: DeviceInfo, *, override: float | None = None) -> BandwidthPeak:
    """Peak memory bandwidth of `device` in GB/s (the table's `hbm_tbps` x 1000), or None with the reason.

    A partition (MIG slice, CPX) gets None: its share of the memory bandwidth follows its memory slices, not its
    SM/CU count, so the FLOP scaling of `lookup` would be wrong here.
    """
    if override is not None:
        return BandwidthPeak(override, f"config override peak_membw_gbps={override:g}", "override", "")
    if device.kind == "cpu":
        # The bandwidth a CPU reaches depends on its DIMM population and channels, which no table here knows.
        return BandwidthPeak(None, None, None, CPU_MEMBW_NOTE)
    entry, why = match_device(device)
    hint = "pass peak_membw_gbps=<GB/s> to set one"
    if entry is None:
        return BandwidthPeak(None, None, None, f"{why}; {hint}")
    if entry.get("hbm_tbps") is None:
        return BandwidthPeak(None, None, entry["id"], f"{entry['id']} has no published memory bandwidth; {hint}")
    if "per_neuroncore" in entry:
        degree, why = neuron_unit(entry, device)
        if degree != entry["neuroncores"]:  # a logical core shares the chip's HBM: AWS publishes no per-core share
            return BandwidthPeak(None, None, entry["id"], why or (
                f"device = one logical NeuronCore (LNC={degree}) of {entry['id']}'s {entry['neuroncores']}: its "
                f"share of the chip's memory bandwidth is not published; {hint}"))
    factor, note = _scale(entry, device)
    if factor is None:  # more SMs/CUs than the part: the name match is wrong
        return BandwidthPeak(None, None, entry["id"], note)
    if factor != 1.0:
        seen, full = device.multiprocessors, entry["multiprocessors"]
        return BandwidthPeak(None, None, entry["id"], f"{seen}/{full} SMs/CUs visible (MIG slice or partition): "
                                                      f"its share of the memory bandwidth is not published; {hint}")
    confidence = " (low confidence)" if entry.get("confidence") == "low" else ""
    return BandwidthPeak(entry["hbm_tbps"] * 1000.0, entry["source"] + confidence, entry["id"], "")


CPU_TDP_NOTE = "not stated: the peak table holds no TDP for a CPU (a package's TDP is not read from any source here)"


def lookup_tdp(device: DeviceInfo | None) -> Tdp:
    """The board power of `device`'s peak-table entry, or None with why: a CPU, a device not in the table, or an
    entry whose vendor document states none that was read. The figure is the whole board's, whatever share of it
    (MIG slice, partition) the device is."""
    if device is None or device.kind == "cpu":
        return Tdp(None, None, CPU_TDP_NOTE if device is not None else "not stated: no device")
    entry, why = match_device(device)
    if entry is None:
        return Tdp(None, None, f"not stated: {why}")
    tdp = entry.get("tdp")
    if tdp is None:
        return Tdp(None, None, f"not stated: the peak table gives no sourced TDP for {entry['id']}")
    span = tdp.get("range_w")
    ranged = f"; the source gives a range, {span[0]:g}-{span[1]:g} W: its upper bound" if span else ""
    return Tdp(float(tdp["w"]), f"{tdp['source']} ({tdp['url']}){ranged}", None)
