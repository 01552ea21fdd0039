"""nccl-tests and rccl-tests logs: the text table (every version's columns, out-of-place and in-place halves) and
the JSON file of versions that write one (`-J FILE.json`), parsed into entries whose bandwidths are re-derived.

What the tools print, read in NVIDIA/nccl-tests at v2.19.6 (a0b82b2) and ROCm/rccl-tests at ae3e635:
- src/util.cu `writeBenchmarkLinePreamble`: size (B) = max(send, receive bytes), count = the collective's count
  parameter (per rank for all_gather, reduce_scatter, alltoall), type, redop, root; `writeBenchmarkLineBody`: time (us,
  the mean over iterations of the ranks' average), algbw and busbw (GB/s = 1e9 B/s), #wrong, each through
  `getFloatStr` (2 decimals when they fit the column, else 1, else 0, else %.1e); `writeResultFooter`:
  "# Avg bus bandwidth : %g"; `writeDeviceReport`: "# nccl-tests version ...", "#  Rank %2d Group %2d Pid %6d on
  %10s device %2d [%s] %s" (older releases: no Group; rccl-tests prints "rccl-tests: Version ...").
- JSON (`JSON_FILE_VERSION 3`): "results": [{size, count, type, redop, root, out_of_place: {time, alg_bw,
  bus_bw, nwrong}, in_place: {...}}], "config": {nthreads, ngpus, ..., devices: [{rank, device_info...}]} with one
  device entry per process (the first GPU of each; util.cu parses one "#  Rank" line per process), "args",
  "nccl_version"; numbers through "%lf" (6 decimals).
- rccl-tests' own result file (`-x/--output_file FILE -Z json`, later `-X/--rccl_output_file`; ROCm/rccl-tests PR
  #93, 2024-10, and the Reporter class of src/common.cu in 2026): one object per result with "name" (AllReduce...),
  "size" (max of send and receive bytes, as the table's), "type", "redop", "inPlace" (0/1), "time" (us), "algBw",
  "busBw" (GB/s, full precision), "#wrong" (later "wrong"), and "gpus" (GPUs per process) in builds without MPI or
  "nodes", "ranks", "ranksPerNode", "gpusPerRank" with MPI; the rank count GetBw uses is processes x GPUs per
  process. Written first one object per line, since PR #140 (2025-07) as one JSON list.
- The bandwidths, src/<op>.cu `<Op>GetBw(count, typesize, sec, ...)`: algbw = count x typesize x M / 1e9 / sec with
  M = 1 (all_reduce, broadcast, reduce, sendrecv), n (all_gather, reduce_scatter, alltoall, gather, scatter),
  n - 1 (hypercube); busbw = algbw x F, F = 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter, alltoall,
  gather, scatter), 1 (broadcast, reduce, sendrecv, hypercube). Older releases used other conventions (before 2020
  all_gather's algbw was count x typesize x (n-1) / t with F = 1): such a log's algbw disagrees and is flagged.
Old releases print "error" (the largest deviation, %e) instead of "#wrong"; either non-zero is a wrong result.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from xmfu.harness.results import importers
from xmfu.harness.results.importers import LogError

# op -> (M(n): the multiple of count x typesize algbw divides by time, F(n): the bus factor), as GetBw above.
OPS: dict[str, tuple[Any, Any]] = {
    "all_reduce": (lambda n: 1, lambda n: 2 * (n - 1) / n),
    "all_gather": (lambda n: n, lambda n: (n - 1) / n),
    "reduce_scatter": (lambda n: n, lambda n: (n - 1) / n),
    "alltoall": (lambda n: n, lambda n: (n - 1) / n),
    "gather": (lambda n: n, lambda n: (n - 1) / n),
    "scatter": (lambda n: n, lambda n: (n - 1) / n),
    "broadcast": (lambda n: 1, lambda n: 1.0),
    "reduce": (lambda n: 1, lambda n: 1.0),
    "sendrecv": (lambda n: 1, lambda n: 1.0),
    "hypercube": (lambda n: n - 1, lambda n: 1.0),
}
# nccl-tests' type names (src/common.cu test_typenames) -> bytes per element, and xmfu's dtype names where it has one.
TYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2, "float": 4,
              "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
DTYPES = {"float": "fp32", "half": "fp16", "bfloat16": "bf16", "double": "fp64"}
_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+|nan|inf)"
_RANK = re.compile(r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[[^\]]*\]\s+(.+?)\s*$")


@dataclass(frozen=True)
class Entry:
    """One half (out-of-place or in-place) of one table line."""

    line: int
    size: int
    count: int
    type: str
    redop: str
    root: int
    in_place: bool
    time_us: float
    algbw: float
    busbw: float
    wrong: float | None  # #wrong (or old releases' max error); None: N/A (not checked)
    wrong_kind: str  # "wrong" (a count of elements) or "max_error" (old releases)
    precision: dict[str, float]


@dataclass
class Parsed:
    tool: str  # nccl-tests or rccl-tests
    op: str | None  # None only while a log that names none is parsed (then infer_op)
    ranks: int
    device: str | None
    version: str | None
    command: str | None
    settings: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)
    avg_busbw: float | None = None
    op_inferred: str | None = None  # how the op was inferred, where the log does not name it (infer_op)
    # rank -> [host, device index, device name], from the `Rank N ... on HOST device D [...] NAME` lines (text logs)
    rank_map: dict[int, list[Any]] = field(default_factory=dict)


def half_unit(text: str) -> float:
    """Half a unit of the last digit `text` was printed with (getFloatStr's %.2f, %.1f, %.0f or %.1e)."""
    mantissa, _, exponent = text.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (-decimals + (int(exponent) if exponent else 0))


def rederive(op: str, count: int, type_name: str, ranks: int, time_us: float) -> tuple[float, float, float]:
    """(bytes algbw counts, algbw GB/s, bus factor) under the current nccl-tests conventions (GetBw above)."""
    multiple, factor = OPS[op]
    size = count * TYPE_BYTES[type_name] * multiple(ranks)
    return size, size / (time_us * 1e-6) / 1e9, factor(ranks)


def disagreements(op: str, e: Entry, ranks: int) -> tuple[dict[str, float], list[str]]:
    """xmfu's algbw and busbw from the entry's count, type and printed time, and every printed figure they do not
    reproduce: the printed time's rounding carried through (a time t printed to +-dt gives algbw within
    [S/(t+dt), S/(t-dt)]) and the printed bandwidth's own rounding allowed for."""
    size, algbw, factor = rederive(op, e.count, e.type, ranks, e.time_us)
    dt = e.precision["time_us"]
    low = size / ((e.time_us + dt) * 1e-6) / 1e9
    high = size / ((e.time_us - dt) * 1e-6) / 1e9 if e.time_us > dt else float("inf")
    said = []
    for name, printed, lo, hi in (("algbw_gbps", e.algbw, low, high),
                                  ("busbw_gbps", e.busbw, low * factor, high * factor)):
        slack = e.precision[name]
        if not lo - slack <= printed <= hi + slack:
            want, times = (algbw, "") if name == "algbw_gbps" else (algbw * factor, f" x {factor:.6g}")
            said.append(f"{name}: printed {printed:g}, but {size} B / {e.time_us:g} us{times} gives {want:.6g} "
                        f"(allowing +-{dt:g} us and +-{slack:g} GB/s of printed rounding)")
    return {"algbw_gbps": algbw, "busbw_gbps": algbw * factor, "bus_factor": factor, "size_bytes": size}, said


def _op(text: str, given: str | None) -> str | None:
    """The op named (--op), or the one the log names (`<op>_perf`); None: neither (`infer_op` then)."""
    if given:
        return given
    found = re.search(r"\b(" + "|".join(OPS) + r")_perf\b", text)
    return found.group(1) if found else None


# What else an op's table line shows (src/<op>.cu at v2.19.6: RunTest's TimeTest arguments, GetCollByteCount):
# (a reduction: redop other than "none"; a root: root >= 0; the printed size over count x type size: 1, or n where
# count is per rank). With the bus factor F(n) of OPS they tell the ops apart, but for all_gather and alltoall
# (alike in all four) and gather and scatter.
SIGNATURES = {"all_reduce": (True, False, 1), "all_gather": (False, False, "n"), "reduce_scatter": (True, False, "n"),
              "alltoall": (False, False, "n"), "gather": (False, True, "n"), "scatter": (False, True, "n"),
              "broadcast": (False, True, 1), "reduce": (True, True, 1), "sendrecv": (True, False, 1),
              "hypercube": (False, False, "n")}
FACTOR_WORDS = {"all_reduce": "2(n-1)/n", "broadcast": "1", "reduce": "1", "sendrecv": "1", "hypercube": "1"}


def _fits(factor: float, e: Entry) -> bool:
    """Whether the printed busbw is factor x the printed algbw, within both figures' printed rounding."""
    da, db = e.precision["algbw_gbps"], e.precision["busbw_gbps"]
    return factor * (e.algbw - da) - db <= e.busbw <= factor * (e.algbw + da) + db


def _signature(op: str, e: Entry, n: int) -> bool:
    reduces, rooted, multiple = SIGNATURES[op]
    size = e.count * TYPE_BYTES[e.type] * (n if multiple == "n" else 1)
    return (e.redop != "none") == reduces and (e.root >= 0) == rooted and (e.count == 0 or size == e.size)


def infer_op(entries: list[Entry], n: int, columns: bool) -> tuple[str, str]:
    """(op, how it was inferred) for a log that names no test (issue 42 item 4): the op whose bus factor F(n)
    (GetBw, above) every printed busbw/algbw pair fits within its rounding, and whose line signature (SIGNATURES)
    every line has. LogError, saying why, where none or several fit."""
    ask = f"name it with --op ({', '.join(OPS)})"
    if not columns:
        raise LogError("the log does not name its test (no `<op>_perf` in it), and its table has no redop and root "
                       f"columns (a release before 2020, whose bus factors differed): {ask}")
    if n < 2:
        raise LogError(f"the log does not name its test, and on one rank every op's busbw is 0 or algbw: {ask}")
    fits = [op for op, (_, factor) in OPS.items() if all(_fits(factor(n), e) for e in entries)]
    found = [op for op in fits if all(_signature(op, e, n) for e in entries)]
    if len(found) != 1:
        said = f"{' and '.join(found)} fit alike" if found else "no op's bus factor and line layout fit every line"
        raise LogError(f"the log does not name its test, and its op cannot be told from its lines ({said}): {ask}")
    op, top = found[0], max(entries, key=lambda e: e.algbw)
    ratio = f"{top.busbw / top.algbw:.4g}" if top.algbw else "n/a"
    return op, (f"{op} inferred (the log names no test): printed busbw/algbw {ratio} at {top.size} B is "
                f"{FACTOR_WORDS.get(op, '(n-1)/n')} at n = {n} ranks (= {OPS[op][1](n):.4g}) within its printed "
                f"rounding on every line, with redop {top.redop}, root {top.root} and size = "
                f"{SIGNATURES[op][2]} x count x type size, as {op}_perf prints them")


def _header(lines: list[str]) -> tuple[str, str | None, str | None, dict[str, Any], dict[int, list[Any]]]:
    """(tool, version, command, settings, rank -> [host, device index, device name])."""
    tool, version, command, settings, devices = "nccl-tests", None, None, {}, {}
    for line in lines:
        s = line.strip()
        if m := re.match(r"#?\s*(nccl|rccl)-tests version (\S+(?: \([0-9a-f]+\))?)", s):
            tool, version = f"{m.group(1)}-tests", m.group(2)
        elif m := re.match(r"rccl-tests: Version (\S+)", s):
            tool, version = "rccl-tests", m.group(1)
        elif m := re.match(r"#?\s*nThread (\d+) nGpus (\d+) .*?warmup iters: (\d+)\s+iters: (\d+)", s):
            settings = {"nthreads": int(m.group(1)), "ngpus": int(m.group(2)), "warmup": int(m.group(3)),
                        "iters": int(m.group(4))}
            if g := re.search(r"graph: (\d+)", s):
                settings["graph"] = int(g.group(1))
        elif m := _RANK.match(s):
            devices[int(m.group(1))] = [m.group(2), int(m.group(3)), m.group(4)]
        elif command is None and re.search(r"\b\w+_perf(_mpi)?\b", s) and not s.startswith("#"):
            command = s.lstrip("$> ").strip()
    if re.search(r"\bRCCL\b|\brccl-tests\b", "\n".join(lines[:80])) and tool == "nccl-tests" and version is None:
        tool = "rccl-tests"
    return tool, version, command, settings, devices


def _columns(lines: list[str]) -> tuple[int, list[str]]:
    """The line number and column names of the table's header: `size count type [redop] [root] time algbw busbw
    (#wrong|error) time algbw busbw (#wrong|error)`."""
    for number, line in enumerate(lines):
        words = line.replace("#", " ").split()
        if words[:2] == ["size", "count"] and "algbw" in words:
            return number, words
    raise LogError("no nccl-tests table in the log: no header line naming `size count type ... time algbw busbw`")


def parse_text(text: str, op: str | None = None, ranks: int | None = None) -> Parsed:
    lines = text.splitlines()
    tool, version, command, settings, devices = _header(lines)
    header_at, names = _columns(lines)
    keys = names[:names.index("time")]
    width = len(keys) + 8
    n = ranks or (max(devices) + 1 if devices else None)
    if not n:
        raise LogError("the log lists no `Rank N ... device` lines, so its rank count is unknown: give --ranks N")
    parsed = Parsed(tool, _op(text, op), n, devices[min(devices)][2] if devices else None, version, command, settings,
                    rank_map=devices)
    ended = False
    for number, line in enumerate(lines[header_at + 1:], header_at + 2):
        s = re.sub(r"^\[[^\]]*\]<stdout>:", "", line).strip()
        if m := re.match(r"#?\s*Avg bus bandwidth\s*:\s*(" + _NUMBER + ")", s):
            parsed.avg_busbw, ended = float(m.group(1)), True
            break
        if not s or s.startswith("#") or not s[0].isdigit():
            continue
        words = s.split()
        if len(words) < width:
            raise LogError(f"line {number} is cut short ({len(words)} of the table's {width} columns): the log "
                           "is truncated or not an nccl-tests table")
        parsed.entries += _entries(number, dict(zip(keys, words, strict=False)), words[len(keys):width],
                                   names[len(keys) + 3])
        if len(parsed.entries) > importers.MAX_ROWS:  # stop reading: the log is refused (rows.py says why)
            break
    if not parsed.entries:
        raise LogError("the nccl-tests table has no rows")
    if not ended and len(parsed.entries) <= importers.MAX_ROWS:
        raise LogError("the table does not end with nccl-tests' `# Avg bus bandwidth` line: the log is truncated")
    _sound(parsed, "line")  # before the op is inferred from the figures
    if parsed.op is None:
        parsed.op, parsed.op_inferred = infer_op(parsed.entries, n, {"redop", "root"} <= set(keys))
    return parsed


def _entries(number: int, key: dict[str, str], halves: list[str], wrong_name: str) -> list[Entry]:
    out = []
    try:
        size, count, type_name = int(key["size"]), int(key["count"]), key["type"]
        for place, part in ((False, halves[:4]), (True, halves[4:])):
            wrong = None if part[3] == "N/A" else float(part[3])
            out.append(Entry(number, size, count, type_name, key.get("redop", "none"), int(key.get("root", -1)),
                             place, float(part[0]), float(part[1]), float(part[2]), wrong,
                             "max_error" if wrong_name == "error" else "wrong",
                             {"time_us": half_unit(part[0]), "algbw_gbps": half_unit(part[1]),
                              "busbw_gbps": half_unit(part[2])}))
    except (ValueError, KeyError) as exc:
        raise LogError(f"line {number} is not a row of the nccl-tests table ({exc})") from None
    if type_name not in TYPE_BYTES:
        raise LogError(f"line {number}: type {type_name!r} is not an nccl-tests type ({', '.join(TYPE_BYTES)})")
    return out


def parse_json(text: str, op: str | None = None) -> Parsed:
    """The file `-J FILE.json` writes (JSON_FILE_VERSION 3, src/util.cu): every figure at full precision (%lf)."""
    try:
        data = json.loads(text)
        config = data["config"]
        devices = {int(d["rank"]): str(d["device_info"]) for d in config["devices"]}
        # One "devices" entry per process, parsed from the first "#  Rank" line of its block (writeDeviceReport):
        # the rank count is processes x threads x GPUs per thread, as GetBw's nranks (common.cu).
        ranks = len(config["devices"]) * int(config.get("nthreads", 1)) * int(config.get("ngpus", 1))
        args = [str(a) for a in data.get("args", [])]
        parsed = Parsed("nccl-tests", _op(" ".join(args), op), ranks, devices[min(devices)],
                        f"json/{data.get('version')} nccl {data.get('nccl_version')}", " ".join(args) or None,
                        {"iters": config.get("iterations"), "warmup": config.get("warmup_iters"),
                         "graph": config.get("graph")})
        for number, r in enumerate(data["results"], 1):
            for place, name in ((False, "out_of_place"), (True, "in_place")):
                half = r.get(name)
                if half is None:
                    continue
                time = half.get("time", half.get("cpu_time"))
                parsed.entries.append(Entry(number, int(r["size"]), int(r["count"]), str(r["type"]),
                                            str(r["redop"]), int(str(r["root"]).strip()), place, float(time),
                                            float(half["alg_bw"]), float(half["bus_bw"]),
                                            None if half.get("nwrong") is None else float(half["nwrong"]), "wrong",
                                            dict.fromkeys(("time_us", "algbw_gbps", "busbw_gbps"), 5e-7)))
        parsed.avg_busbw = (data.get("average_bus_bandwidth") or {}).get("bandwidth")
    except RecursionError:  # json recurses per level: a file nested past Python's limit is no result file
        raise LogError("not an nccl-tests JSON result file: nested deeper than Python's parser can follow (nccl-tests "
                       "writes three levels)") from None
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
        raise LogError(f"not an nccl-tests JSON result file ({type(exc).__name__}: {exc})"[:300]) from None
    if not parsed.entries:
        raise LogError("the nccl-tests JSON file holds no results")
    _sound(parsed, "result")  # before the op is inferred from the figures
    if parsed.op is None:
        parsed.op, parsed.op_inferred = infer_op(parsed.entries, parsed.ranks, True)
    return parsed


# rccl-tests' collective names (each test's `name`, e.g. src/all_reduce.cu "AllReduce") -> the ops above
RCCL_NAMES = {name.replace("_", ""): name for name in OPS} | {"sendrecv": "sendrecv", "alltoall": "alltoall"}


def _rccl_records(text: str) -> list[dict[str, Any]]:
    """The result objects of an rccl-tests output file: a JSON list (PR #140 on) or one object per line (PR #93)."""
    stripped = text.strip()
    if stripped.startswith("["):
        records = json.loads(stripped)
    else:
        records = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    if not records or not all(isinstance(r, dict) for r in records):
        raise ValueError("no result objects")
    return records


def parse_rccl_json(text: str, op: str | None = None) -> Parsed:
    """rccl-tests' `--output_file` JSON (see the module docstring): full-precision figures, no device lines."""
    try:
        records = _rccl_records(text)
        names = {str(r["name"]) for r in records}
        if len(names) != 1:
            raise ValueError(f"one collective per file, found {sorted(names)}")
        name = names.pop()
        found = RCCL_NAMES.get(name.lower())
        if op is None and found is None:
            raise ValueError(f"collective {name!r} is not one xmfu re-derives ({', '.join(OPS)})")
        first = records[0]
        mpi = "ranks" in first
        ranks = int(first["ranks"]) * int(first["gpusPerRank"]) if mpi else int(first["gpus"])
        settings = {"nodes": int(first["nodes"])} if mpi else {}
        parsed = Parsed("rccl-tests", op or found, ranks, None, "output file (json)", None, settings)
        for number, r in enumerate(records, 1):
            wrong = r.get("wrong", r.get("#wrong"))
            type_name = str(r["type"])
            multiple = OPS[parsed.op][0](ranks)
            size = int(r["size"])
            parsed.entries.append(Entry(number, size, size // (TYPE_BYTES[type_name] * multiple), type_name,
                                        str(r["redop"]), -1, bool(int(r["inPlace"])), float(r["time"]),
                                        float(r["algBw"]), float(r["busBw"]),
                                        None if wrong in (None, "N/A") else float(wrong), "wrong",
                                        dict.fromkeys(("time_us", "algbw_gbps", "busbw_gbps"), 5e-7)))
    except RecursionError:
        raise LogError("not an rccl-tests JSON output file: nested deeper than Python's parser can follow (rccl-tests "
                       "writes two levels)") from None
    except (ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
        raise LogError(f"not an rccl-tests JSON output file ({type(exc).__name__}: {exc})"[:300]) from None
    return parsed


def parse(text: str, op: str | None = None, ranks: int | None = None) -> Parsed:
    """A text table, nccl-tests' `-J` JSON object (it has "results") or rccl-tests' output file (objects with
    "busBw", as a list or one per line)."""
    head = text.lstrip()
    if head.startswith("[") or (head.startswith("{") and '"busBw"' in head.split("\n", 1)[0]):
        return _sound(parse_rccl_json(text, op), "result")
    return parse_json(text, op) if head.startswith("{") else parse_text(text, op, ranks)


def _sound(parsed: Parsed, unit: str) -> Parsed:
    """`parsed`, once every figure a row is built from is one the tools print: a rank count of 1 or more, sizes and
    counts >= 0, a time that is a positive finite number of us (GetBw divides by it), bandwidths and #wrong finite
    and >= 0 (a tiny size prints 0.00 GB/s). A log holding anything else (nan, inf, a negative or zero time) is
    refused naming the line (`unit` N: the table's line, or the JSON file's N-th result), never turned into a row
    that cannot be written or that `xmfu validate` then rejects."""
    if parsed.ranks < 1:
        raise LogError(f"the rank count is {parsed.ranks}. Allowed: 1 or more (give --ranks N)")
    for e in parsed.entries:
        half = "in-place" if e.in_place else "out-of-place"
        figures = (("size", e.size, False), ("count", e.count, False), ("time (us)", e.time_us, True),
                   ("algbw (GB/s)", e.algbw, False), ("busbw (GB/s)", e.busbw, False),
                   (f"#{e.wrong_kind}" if e.wrong_kind == "wrong" else "error", e.wrong, False))
        for name, value, positive in figures:
            if value is not None and not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
                allowed = "a finite number > 0" if positive else "a finite number >= 0"
                raise LogError(f"{unit} {e.line}: the {half} {name} is {value:g}. Allowed: {allowed}, as the tool "
                               "prints; the log was altered or is not the tool's output")
    return parsed
