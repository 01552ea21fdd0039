"""The figures of a suite's verdict (harness/suites/suite.py): per node, what its parts' bundles say.

Pure functions of bundles and rows: achieved matmul against the datasheet peak and the achievable (mamf) one,
the best attention and training-step figures, cost at a price, the sustained phase's first-vs-steady change,
throttling seen, collective bandwidth against the link, and the per-device outliers. A figure that no bundle
holds is None and the page says "not measured". Each figure taken from a row carries that row's quality flags
(`flags`: harness/results/analysis/flags.py), shown beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from xmfu.harness.results.analysis.cost import EnergyPrice, with_energy
from xmfu.harness.results.analysis.flags import flags_text
from xmfu.harness.results.bundle import nodes
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.schema.row import Row

T = TypeVar("T")
OUTLIER_THRESHOLD = 0.03  # a device more than 3% below its node's median is flagged
NO_ENERGY = "the row records no energy"  # a row of a bundle written before rows measured their energy


def outliers(values: Mapping[str, float], threshold: float = OUTLIER_THRESHOLD) -> list[dict[str, Any]]:
    """Each item's figure against the median of all of them, slowest first; `flagged` when more than
    `threshold` below the median (higher is better: TFLOP/s, tokens/s)."""
    if not values:
        return []
    median = statistics.median(values.values())
    out = [{"label": label, "value": v, "median": median, "vs_median": v / median - 1 if median else None,
            "flagged": bool(median) and v < median * (1 - threshold)} for label, v in values.items()]
    return sorted(out, key=lambda d: d["value"])


def timed(r: Row) -> bool:
    return r.status == "ok" and r.timing_valid and r.tflops is not None


def _best(items: Sequence[T], key: Callable[[T], Any]) -> T | None:
    """The item (a row, or a manifest's achievable figure) with the highest key; None without one."""
    return max(items, key=key, default=None)


def achievable(bundles: Sequence[Bundle]) -> dict[str, Any] | None:
    """The best mamf figure among the bundles (manifest `achievable`, found by a mamf sweep; or an imported
    mamf-finder log's: `imported_achievable`)."""
    found = [b.manifest["achievable"] for b in bundles
             if isinstance(b.manifest.get("achievable"), dict)
             and str(b.manifest["achievable"].get("source", "")).startswith("mamf")]
    found += [a for b in bundles if (a := imported_achievable(b)) is not None]
    return _best(found, lambda a: a["tflops"])


def imported_achievable(bundle: Bundle) -> dict[str, Any] | None:
    """An imported mamf-finder log's achievable figure, as a run's manifest states its sweep's: the best of the
    shapes' medians the log printed (importers/rows.py times each shape by its median). None where the log printed
    none (a release before 2024-12 printed only the fastest iteration's rate, a max) or the bundle is not one."""
    rows = [r for r in bundle.rows if r.imported is not None and r.phase == "mamf" and timed(r)]
    best = _best(rows, lambda r: r.tflops)
    if best is None:
        return None
    return {"tflops": best.tflops, "source": f"mamf sweep: {best.backend} log (imported)", "dtype": best.dtype,
            "backend": best.backend, "case_id": best.case_id, "params": best.params,
            "method": best.achievable_method, "device_id": device_id(best)}


def memory_bound_row(r: Row) -> bool:
    """A row whose shape the memory roof bounds (its `roofline` record): judged on bandwidth, not FLOPs."""
    return r.roofline is not None and r.roofline.bound == "memory"


def matmul(bundles: Sequence[Bundle]) -> dict[str, Any] | None:
    """Per backend, its best main-phase matmul against the datasheet peak and the achievable one. A small matmul the
    memory roof bounds is judged on bandwidth (memory_bound), not here."""
    # a row without a phase is a main-phase row (bundles written before phase was)
    rows = [r for b in bundles for r in b.rows if r.workload == "matmul" and (r.phase or "main") == "main"
            and timed(r) and r.steady_state is None and not memory_bound_row(r)]
    if not rows:
        return None
    top = _best(rows, lambda r: r.tflops)
    mamf = achievable(bundles)
    backends = []
    for backend in sorted({r.backend for r in rows}):
        best = _best([r for r in rows if r.backend == backend], lambda r: r.tflops)
        backends.append({"backend": backend, "case_id": best.case_id, "tflops": best.tflops,
                         "of_datasheet": best.mfu, "flags": flags_text(best), "of_roofline": _sol(best),
                         "of_achievable": best.tflops / mamf["tflops"] if mamf else None})
    return {"dtype": top.dtype, "datasheet_tflops": top.peak_tflops, "peak_source": top.peak_source,
            "achievable": mamf, "best": backends[[b["backend"] for b in backends].index(top.backend)],
            "backends": backends, "device_id": device_id(top), "achievable_ci95": _achievable_ci(bundles, mamf)}


def _sol(r: Row) -> float | None:
    return r.roofline.sol_fraction if r.roofline is not None else None


def memory_bound(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per workload and backend, its memory-bound row nearest its roof (decode steps, small matmuls, membw): the
    bandwidth it reached against the memory roof, the share a FLOP count cannot judge."""
    found = [r for r in rows if timed_bytes(r) and memory_bound_row(r)]
    out = []
    for workload, backend in sorted({(r.workload, r.backend) for r in found}):
        best = _best([r for r in found if (r.workload, r.backend) == (workload, backend)], lambda r: _sol(r) or 0)
        out.append({"workload": workload, "backend": backend, "case_id": best.case_id,
                    "bandwidth_gbps": best.bandwidth_gbps, "peak_membw_gbps": best.roofline.peak_membw_gbps,
                    "of_memory_roof": _sol(best), "flags": flags_text(best), "device_id": device_id(best)})
    return out


def timed_bytes(r: Row) -> bool:
    """Validly timed with a bandwidth figure (a copy has no FLOPs, so no TFLOP/s)."""
    return r.status == "ok" and r.timing_valid and r.bandwidth_gbps is not None


def device_id(row: Row) -> str | None:
    """The peak-table id of the device a row ran on (its `peak_entry`), or None: an override, a CPU estimate or an
    unknown device has no id, so no public reference is matched to it."""
    from xmfu.harness.machine.peaks import load_table

    entry = row.peak_entry
    if entry is None and row.imported is not None:  # another tool's log: the device it names, read as xmfu reads one
        from xmfu.harness.machine.peaks import match_device
        from xmfu.harness.machine.platform import DeviceInfo

        found, _ = match_device(DeviceInfo(kind=row.platform, name=row.device, vendor=""))
        return found["id"] if found else None
    return entry if entry in {e["id"] for e in load_table()["devices"]} else None


def _achievable_ci(bundles: Sequence[Bundle], mamf: dict[str, Any] | None) -> list[float] | None:
    """The 95% CI of the achievable figure: its row's (the mamf sweep's best case), where a bundle holds it."""
    if not mamf:
        return None
    row = next((r for b in bundles for r in b.rows if r.case_id == mamf.get("case_id")
                and r.backend == mamf.get("backend") and r.dtype == mamf.get("dtype")), None)
    return row.tflops_ci95 if row is not None else None


def attention(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The fastest backend per attention mode (fwd, fwd_bwd...), with its MFU, over every shape."""
    timed_rows = [r for r in rows if r.workload == "attention" and timed(r)]
    out = []
    for mode in sorted({r.params.get("mode", "") for r in timed_rows}):
        best = _best([r for r in timed_rows if r.params.get("mode", "") == mode], lambda r: r.tflops)
        out.append(_attention_figure(best))
    return out


def attention_shapes(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The fastest backend at each attention shape (its conditions: mode, dtype, shape, mask), per device and FLOP
    convention (TFLOP/s under two counts are not ranked together): what a public reference at one shape is
    compared with."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.workload != "attention" or not timed(r):
            continue
        f = _attention_figure(r)
        key = repr((f["device_id"], f["flop_convention"], sorted(f["conditions"].items())))
        if key not in best or f["tflops"] > best[key]["tflops"]:
            best[key] = f
    return list(best.values())


def _attention_figure(r: Row) -> dict[str, Any]:
    """One attention row as a verdict figure, with the conditions a public reference is matched on (the row's own
    param names; seq_len only where query and key/value lengths are equal, else both)."""
    p = r.params
    seq = p.get("seq_q") if p.get("seq_q") == p.get("seq_kv") else f"q{p.get('seq_q')}/kv{p.get('seq_kv')}"
    conditions = {"mode": p.get("mode", ""), "dtype": r.dtype, "batch": p.get("batch"),
                  "heads": p.get("heads"), "kv_heads": p.get("kv_heads"), "seq_len": seq,
                  "head_dim": p.get("head_dim"), "causal": p.get("causal"), "world_size": p.get("world_size") or 1}
    return {"mode": conditions["mode"], "backend": r.backend, "case_id": r.case_id, "tflops": r.tflops,
            "mfu": r.mfu, "flags": flags_text(r), "tflops_ci95": r.tflops_ci95,
            "device_id": device_id(r), "flop_convention": r.flop_convention, "conditions": conditions}


def training(rows: Sequence[Row], price: float | None, energy: EnergyPrice | None = None) -> list[dict[str, Any]]:
    """Per backend, its best training step: MFU, tokens/s per device, J/token and tokens/s/W where its energy was
    measured, and what they cost at `price` (and `energy`: the energy line)."""
    timed_rows = [r for r in rows if r.workload == "transformer" and timed(r)]
    out = []
    for backend in sorted({r.backend for r in timed_rows}):
        best = _best([r for r in timed_rows if r.backend == backend], lambda r: _tokens_per_s(r) or 0)
        tokens, ci, p = _tokens_per_s(best), best.tflops_ci95, best.params
        out.append({"backend": backend, "case_id": best.case_id, "mfu": best.mfu, "tflops": best.tflops,
                    "tokens_per_s": tokens, "flags": flags_text(best), **with_energy(best, price, energy),
                    **_format_mfu(best),
                    **_energy_figures(best),
                    # tokens/s moves with TFLOP/s (the same step time), so its CI is TFLOP/s's, scaled
                    "tokens_per_s_ci95": [tokens * c / best.tflops for c in ci] if tokens and ci else None,
                    "device_id": device_id(best), "dtype": best.dtype, "model": p.get("name"),
                    "seq_len": p.get("seq_len"), "batch": p.get("batch"), "world_size": p.get("world_size") or 1,
                    # from the hosts its ranks exchanged: None where not recorded
                    "nodes": nodes.of_row(best)})
    return out


def _format_mfu(r: Row) -> dict[str, Any]:
    """A step whose FLOPs run in several formats (fp8 training): `mfu` is against its dtype's peak, so the page says
    so and gives the figure against the FLOP-weighted peak of the formats used beside it; {} for other steps."""
    m = r.mfu_formats
    if m is None:
        return {}
    return {"mfu_words": m.words(), "mfu_weighted": m.mfu_weighted,
            "mfu_by_denominator": [[f"{r.dtype} datasheet peak (MFU)", r.mfu],
                                   ["FLOP-weighted peak of the formats used (MFU)", m.mfu_weighted]]}


def _tokens_per_s(r: Row) -> float | None:
    """A training row's tokens per second per device, where it has one."""
    return (r.throughput or {}).get("tokens_per_s")


def sustained(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Rows of a sustained phase: throughput in the first window against the steady state, and when it settled."""
    out = []
    for r in rows:
        s = r.steady_state
        if r.status != "ok" or s is None:
            continue
        first, steady = s.first_window, s.steady_window
        out.append({"backend": r.backend, "case_id": r.case_id, "first_tflops": first.tflops,
                    "steady_tflops": steady.tflops, "first_vs_steady": s.first_vs_steady_time_change,
                    "reached_after_s": s.reached_after_s, "reached": s.reached,
                    "windows": len(s.windows), "first_clock_mhz": first.mean_sm_clock_mhz,
                    "steady_clock_mhz": steady.mean_sm_clock_mhz, "flags": flags_text(r)})
    return out


def throttling(rows: Sequence[Row]) -> dict[str, Any]:
    """The clock-limiting reasons seen while timing, each with the largest share of readings it was active in
    (and where), over every row with telemetry; `readable` False where no reading could say."""
    readings, seen = 0, {}
    for r in rows:
        t = r.telemetry
        if t is None:  # not timed
            continue
        readings += t.throttle_readings
        for reason, share in (t.throttle_fraction or {}).items():
            if share > seen.get(reason, {"fraction": -1})["fraction"]:
                seen[reason] = {"fraction": share, "case_id": r.case_id, "backend": r.backend}
    return {"readable": readings > 0, "readings": readings, "reasons": seen,
            "why_not": None if readings else ("no telemetry reading said which clock limits were active; this "
                                              "platform's sampler reads no throttle reasons, and xmfu doctor lists "
                                              "the fields it reads")}


def devices(bundles: Sequence[Bundle], threshold: float = OUTLIER_THRESHOLD) -> list[dict[str, Any]]:
    """The same matmul on each device (one bundle per device): its best TFLOP/s against the node's median."""
    values, ident, marks = {}, {}, {}
    for b in bundles:
        best = _best([r for r in b.rows if timed(r)], lambda r: r.tflops)
        if best is None:
            continue
        # '?': a row that does not say which device it measured (imported from another tool's log)
        label = f"{'?' if best.device_index is None else best.device_index}: {best.device}"
        values[label] = best.tflops
        ident[label] = best.device_uuid or best.device_pci_bus_id or ""
        marks[label] = flags_text(best)
    return [{**d, "identity": ident[d["label"]], "flags": marks[d["label"]]} for d in outliers(values, threshold)]


def collectives(bundles: Sequence[Bundle]) -> list[dict[str, Any]]:
    """Each collective series' peak bus bandwidth against the device's link (the run's summary)."""
    out = []
    for b in bundles:
        ids = {device_id(r) for r in b.rows}
        # the hosts the run's ranks ran on, where the bundle records them (an imported log: its rank map)
        spanned = nodes.of_manifest(b.manifest) or _imported_nodes(b)
        device = ids.pop() if len(ids) == 1 else None  # ranks on different parts: no one device id
        for series, s in ((b.manifest.get("summary") or {}).get("collectives") or imported_collectives(b)).items():
            if s.get("peak_busbw_gbps") is None:
                continue
            of_link = s.get("peak_busbw_of_link")
            out.append({"series": series, "ranks": s.get("ranks"), "peak_busbw_gbps": s["peak_busbw_gbps"],
                        "device_id": device, "op": series.split("/")[1] if series.count("/") >= 1 else None,
                        "nodes": spanned,
                        "peak_at_bytes": s.get("peak_at_bytes"), "link_gbps": s.get("link_gbps"),
                        "of_link": of_link if isinstance(of_link, (int, float)) else None,
                        "link_note": of_link if isinstance(of_link, str) else ""})
    return sorted(out, key=lambda d: -d["peak_busbw_gbps"])


def imported_collectives(bundle: Bundle) -> dict[str, dict[str, Any]]:
    """An imported nccl-tests / rccl-tests log's series as a run's summary states its own (workloads/collectives/
    summary.py): per tool, op and out-of-place / in-place, the peak bus bandwidth over the sizes the log printed."""
    series: dict[str, list[Row]] = {}
    for r in bundle.rows:
        if r.imported is not None and r.workload == "collectives" and r.status == "ok" and r.busbw_gbps is not None:
            place = "inplace" if r.params.get("in_place") else "outofplace"
            series.setdefault(f"{r.backend}/{r.params.get('op')}/{place}", []).append(r)
    out = {}
    for name, rows in sorted(series.items()):
        best = max(rows, key=lambda r: r.busbw_gbps or 0.0)
        out[name] = {"ranks": best.ranks, "peak_busbw_gbps": best.busbw_gbps, "peak_at_bytes": best.size_bytes_actual,
                     "link_gbps": None, "peak_busbw_of_link": "not compared: an imported log's link is not known"}
    return out


def _imported_nodes(bundle: Bundle) -> int | None:
    """The hosts an imported log's ranks ran on (its rows' rank maps: bundle/nodes.py), or None: not listed."""
    counts = {nodes.of_row(r) for r in bundle.rows if r.imported is not None and r.workload == "collectives"}
    return counts.pop() if len(counts) == 1 else None


def inference_energy(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Per device, model, phase, batch, dtype and lengths, the inference row with the least J/token over the backends
    (decode: per generated token; prefill: per prompt token), or one of them with why none was measured: what a
    public J/token reference is compared with (harness/suites/yardsticks.py)."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.workload != "inference" or not timed(r):
            continue
        f = _inference_energy_figure(r)
        key = repr((f["device_id"], sorted(f["conditions"].items()), f["lengths"]))
        held = best.get(key)
        if held is None or (f["j_per_token"] is not None and (held["j_per_token"] is None
                                                             or f["j_per_token"] < held["j_per_token"])):
            best[key] = f
    return list(best.values())


def _inference_energy_figure(r: Row) -> dict[str, Any]:
    p, e = r.params, r.energy
    decode = p.get("phase") == "decode"
    kind = "generated_tokens" if decode else "prompt_tokens"  # the token kinds of InferenceSpec.work_units
    return {"backend": r.backend, "case_id": r.case_id, "device_id": device_id(r),
            "j_per_token": (e.j_per_token or {}).get(kind) if e else None,
            "j_per_token_ci95": (e.j_per_token_ci95 or {}).get(kind) if e else None,
            "energy_source": e.source if e else "not measured",
            "energy_reason": (e.reason if e else NO_ENERGY) or f"no J/token per {kind.replace('_', ' ')}",
            "lengths": f"p{p.get('prompt_len')}" + (f"-g{p.get('gen_len')}" if decode else ""),
            "conditions": {"model": p.get("name"), "phase": p.get("phase"), "batch": p.get("batch"),
                           "dtype": r.dtype, "world_size": p.get("world_size") or 1}}


def _energy_figures(row: Row) -> dict[str, Any]:
    """A training row's energy: where it came from (why not), J/token and tokens/s/W (point figures)."""
    e = row.energy
    return {"energy_source": e.source if e else "not measured", "energy_reason": e.reason if e else NO_ENERGY,
            "j_per_token": (e.j_per_token or {}).get("tokens") if e else None,
            "tokens_per_s_per_w": (e.tokens_per_s_per_w or {}).get("tokens") if e else None}


def node(parts: Mapping[str, tuple[str, Sequence[Bundle]]], price: float | None,
         threshold: float = OUTLIER_THRESHOLD, energy: EnergyPrice | None = None) -> dict[str, Any]:
    """Every verdict figure of one node, from its parts: name -> (kind, bundles)."""
    single = [b for kind, bundles in parts.values() if kind == "run" for b in bundles]
    rows = [r for b in single for r in b.rows]
    every = [r for _, bundles in parts.values() for b in bundles for r in b.rows]
    return {"matmul": matmul(single), "memory_bound": memory_bound(rows), "attention": attention(rows),
            "attention_shapes": attention_shapes(rows),
            "training": training(rows, price, energy), "inference_energy": inference_energy(rows),
            "sustained": sustained(rows), "throttling": throttling(every),
            "devices": devices([b for kind, bundles in parts.values() if kind == "devices" for b in bundles],
                               threshold)}


def compare_nodes(figures: Mapping[str, dict[str, Any]], threshold: float = OUTLIER_THRESHOLD) -> dict[str, Any]:
    """Nodes against each other on the figures they share: best matmul, achievable, training tokens/s, slowest
    device; each with the outlier rule applied across nodes."""
    picks = {"best matmul TFLOP/s": lambda f: ((f.get("matmul") or {}).get("best") or {}).get("tflops"),
             "achievable TFLOP/s (mamf)": lambda f: ((f.get("matmul") or {}).get("achievable") or {}).get("tflops"),
             "training tokens/s per device": lambda f: max((t["tokens_per_s"] or 0 for t in f.get("training") or []),
                                                           default=None) or None,
             "slowest device TFLOP/s": lambda f: (f.get("devices") or [{}])[0].get("value")}
    out = {}
    for name, pick in picks.items():
        values = {host: v for host, f in figures.items() if (v := pick(f)) is not None}
        out[name] = outliers(values, threshold) if len(values) > 1 else []
    return out
