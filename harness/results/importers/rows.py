"""An imported log's rows, built from the parsed log: the same function writes the bundle (bundle/imported.py) and
`xmfu validate` re-runs it on the kept log (rederive/imported.py).

An imported row has one sample: the time its tool printed (nccl-tests: the mean per operation over its iterations,
us; mamf-finder: the time its median TFLOP/s implies under 2mnk). time_s is re-derived from it, the rates from
time_s, and the whole row from the kept log; nothing beyond what the log printed is claimed (n = 1, CI = the
sample). Backends are the tools' names (nccl-tests, rccl-tests, mamf-finder), so compare never pairs an imported row
with xmfu's own as the same backend, and the comparability protocol names the tool and its version.
"""

from __future__ import annotations

from typing import Any

from xmfu.harness.results import importers
from xmfu.harness.results.importers import LogError, mamf_finder, nccl_tests
from xmfu.harness.results.schema.comparability import comparability_fields, comparability_key
from xmfu.harness.results.statistics.summary import summarize

TOOLS = ("nccl-tests", "mamf-finder")
# What an import's rows hold, named in its config.yaml (`import.rows`), so that a bundle imported before a change
# re-derives as it was written: 1 (no `rows` key): as first written; 2: an nccl-tests row's notes keep the log's
# rank map (rank -> [host, device index, device name]) where the log lists every rank, which gives the node count
# public references are matched on (bundle/nodes.py; issue 42 item 3).
ROWS = 2
NCCL_CONVENTION = "nccl-tests-busbw/1"  # the collectives workload's convention (workloads/collectives/spec.py)


def _time(seconds: float) -> dict[str, Any]:
    s = summarize([seconds], 1)
    return {"n": s.n, "median": s.median, "mean": s.mean, "min": s.min, "max": s.max, "p10": s.p10, "p90": s.p90,
            "p99": s.p99, "ci95_low": s.ci95_low, "ci95_high": s.ci95_high, "cv": s.cv,
            "ci_method": "one sample: the figure the imported log printed"}


def _keyed(row: dict[str, Any], protocol: dict[str, Any]) -> dict[str, Any]:
    fields = comparability_fields(row["workload"], row["params"], row["dtype"], row["flop_convention"], protocol)
    return {**row, "comparability": fields, "comparability_key": comparability_key(fields)}


def _imported(tool: str, version: str | None, command: str | None, log: str, line: int, printed: dict,
              precision: dict, rederived: dict, said: list[str]) -> dict[str, Any]:
    return {"tool": tool, "version": version, "command": command, "log": log, "line": line, "printed": printed,
            "precision": precision, "rederived": rederived, "disagreements": said}


def _notes(p: nccl_tests.Parsed, version: int) -> dict[str, Any]:
    """An nccl row's notes: its rank count, and (rows 2 on) the log's rank map where it lists every rank (a log
    that shows only some of its `Rank` lines says nothing of the others' hosts)."""
    notes: dict[str, Any] = {"ranks": p.ranks}
    if p.op_inferred:  # a log that names no test: its op from its lines (nccl_tests.infer_op), said in every row
        notes["op_inferred"] = p.op_inferred
    if version >= 2 and sorted(p.rank_map) == list(range(p.ranks)):
        notes["rank_map"] = [p.rank_map[rank] for rank in range(p.ranks)]
    return notes


def nccl_rows(p: nccl_tests.Parsed, log: str, version: int = 1) -> list[tuple[dict[str, Any], list[float]]]:
    """(row, samples) per out-of-place and in-place half of every table line; `version`: the import's rows
    (ROWS)."""
    out, seen = [], {}
    protocol = {"imported": p.tool, "version": p.version,
                **{k: p.settings.get(k) for k in ("iters", "warmup", "graph")}}
    for e in p.entries:
        base = f"{p.op}-{e.type}-{e.redop}-{e.size}B-{'inplace' if e.in_place else 'outofplace'}"
        seen[base] = seen.get(base, 0) + 1
        case = base if seen[base] == 1 else f"{base}-repeat{seen[base]}"
        figures, said = nccl_tests.disagreements(p.op, e, p.ranks)
        wrong = e.wrong is not None and e.wrong > 0
        params = {"op": p.op, "size_bytes": e.size, "count": e.count, "type": e.type, "redop": e.redop,
                  "root": e.root, "in_place": e.in_place, "ranks": p.ranks}
        row = {"case_id": case, "workload": "collectives", "backend": p.tool,
               "platform": "rocm" if p.tool == "rccl-tests" else "cuda",
               "device": p.device or "not stated in the log", "dtype": nccl_tests.DTYPES.get(e.type, e.type),
               "params": params, "status": "incorrect" if wrong else "ok",
               "reason": f"{p.tool} printed {e.wrong_kind} {e.wrong:g}: a wrong result has no speed" if wrong else None,
               "flops": 0.0, "flop_convention": NCCL_CONVENTION, "bytes": float(e.size),
               "time_s": None if wrong else _time(e.time_us * 1e-6), "tflops": None, "peak_tflops": None,
               "peak_source": None, "mfu": None, "mfu_vs_achievable": None, "timing_valid": True,
               "timing_note": f"imported: {p.tool}'s printed mean time per operation, one figure per case (no "
                              "per-iteration samples in the log)",
               "mfu_reason": "collectives have no FLOPs", "phase": "main", "ranks": p.ranks,
               "notes": _notes(p, version), "busbw_note": None,
               "imported": _imported(p.tool, p.version, p.command, log, e.line,
                                     {"time_us": e.time_us, "algbw_gbps": e.algbw, "busbw_gbps": e.busbw,
                                      e.wrong_kind: e.wrong},
                                     e.precision, {k: figures[k] for k in ("algbw_gbps", "busbw_gbps")}, said)}
        if not wrong:
            row.update({"size_bytes_actual": int(figures["size_bytes"]), "algbw_gbps": figures["algbw_gbps"],
                        "bus_factor": figures["bus_factor"], "busbw_gbps": figures["busbw_gbps"],
                        "wrong": None if e.wrong is None or e.wrong_kind != "wrong" else int(e.wrong)})
        out.append((_keyed(row, protocol), [e.time_us * 1e-6] if not wrong else []))
    return out


def mamf_rows(p: mamf_finder.Parsed, log: str) -> list[tuple[dict[str, Any], list[float]]]:
    """(row, samples) per shape the log names: timed from its median TFLOP/s; a shape whose median the log does
    not print is skipped, saying which figures it does print."""
    out = []
    protocol = {"imported": p.tool, "version": p.version, "statistic": "median", "cold_cache": "flushed"}
    for shape in sorted(p.shapes.values(), key=lambda s: s.line):
        median = shape.printed.get("median")
        seconds = shape.flops / (median * 1e12) if median else None
        stated = ", ".join(f"{k} {v} TFLOP/s" for k, v in shape.printed.items())
        row = {"case_id": f"mamf-{p.dtype}-{shape.m}x{shape.n}x{shape.k}", "workload": "matmul", "backend": p.tool,
               "platform": p.platform, "device": p.device or "not stated in the log", "dtype": p.dtype,
               "params": {"m": shape.m, "n": shape.n, "k": shape.k}, "status": "ok" if seconds else "skipped",
               "reason": None if seconds else f"the log prints no median for this shape (only {stated}); xmfu's "
                                              "figures are computed from a median time",
               "flops": float(shape.flops), "flop_convention": "2mnk", "bytes": 0.0,
               "time_s": _time(seconds) if seconds else None,
               "tflops": shape.flops / seconds / 1e12 if seconds else None, "peak_tflops": None,
               "peak_source": None, "mfu": None, "mfu_vs_achievable": None, "timing_valid": True,
               "timing_note": "imported: the time mamf-finder's printed median TFLOP/s implies under 2mnk (its log "
                              "prints no times)",
               "mfu_reason": "imported row: the peak table is not applied to another tool's figures",
               "phase": "mamf", "achievable_method": "flushed",
               "imported": _imported(p.tool, p.version, p.command, log, shape.line, dict(shape.printed),
                                     dict.fromkeys(shape.printed, mamf_finder.PRECISION),
                                     {"median": shape.flops / seconds / 1e12 if seconds else None,
                                      "flops": float(shape.flops)}, list(shape.said))}
        out.append((_keyed(row, protocol), [seconds] if seconds else []))
    return out


def settings(tool: str, log: str, op: str | None, ranks: int | None) -> dict[str, Any]:
    return {"import": {"tool": tool, "log": log, "op": op, "ranks": ranks, "rows": ROWS}}


def rows_of(config: dict[str, Any], text: str) -> list[tuple[dict[str, Any], list[float]]]:
    """The rows an import config gives for a log's text (the writer's, and `xmfu validate`'s re-derivation)."""
    spec = config["import"]
    version = spec.get("rows", 1)
    if type(version) is not int or not 1 <= version <= ROWS:
        raise LogError(f"config.yaml's import.rows {version!r} is not a rows version this xmfu writes (1 to {ROWS})")
    if spec["tool"] == "mamf-finder":
        parsed = mamf_finder.parse(text)
        _bounded(len(parsed.shapes), "shape")
        return mamf_rows(parsed, spec["log"])
    table = nccl_tests.parse(text, spec.get("op"), spec.get("ranks"))
    _bounded(len(table.entries), "half of a table line, out-of-place or in-place")
    return nccl_rows(table, spec["log"], version)


def _bounded(rows: int, what: str) -> None:
    if rows > importers.MAX_ROWS:
        raise LogError(f"the log gives more than the {importers.MAX_ROWS} rows one import takes (a row per {what}): "
                       "split it into logs of fewer lines (one per operation or size range)")


def run_key(config: dict[str, Any]) -> str:
    """The manifest's comparability_key of an import: the hash of its import settings."""
    return comparability_key(config["import"])
