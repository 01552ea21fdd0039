"""A row's energy figures re-derived from the bundle's raw data: telemetry.jsonl's readings of its case (the counter
or the power the row names as its source) over samples.jsonl's intervals, by the formulas the engine used
(harness/results/statistics/energy.py). The start-up counter check is recorded, not re-derived: its readings come
before the first case and are not kept."""

from __future__ import annotations

import math
from array import array
from typing import Any

from xmfu.harness.results.rederive.times import close, is_number
from xmfu.harness.results.statistics.energy import figures, groups, steady_intervals

# the row's energy fields that follow from the data, each re-derived
FIGURES = ("timed_s", "covered_s", "energy_j", "mean_power_w", "j_per_call", "tflops_per_w", "power_limit_fraction",
           "tdp_fraction", "ci")
PER_TOKEN = ("j_per_token", "tokens_per_s_per_w")
CIS = ("mean_power_w_ci95", "j_per_call_ci95")  # lists, compared element by element
KINDS = {"counter": ("energy_j", "counter"), "integrated power": ("power_w", "power")}


Kept = dict[str, tuple[array, array]]  # case -> (times, values): 16 bytes a reading, only where a row needs them


def wanted(rows: list[Any]) -> dict[str, str]:
    """case_id -> the reading field ('energy_j' or 'power_w') a measured row of cases.jsonl (its decoded lines)
    re-derives its energy from; telemetry.jsonl is streamed (issue 42 item 14), so only these readings are kept, as
    two doubles each."""
    out = {}
    for row in rows:
        e = row.get("energy") if isinstance(row, dict) else None
        if isinstance(e, dict) and e.get("source") in KINDS and isinstance(row.get("case_id"), str):
            out[row["case_id"]] = KINDS[e["source"]][0]
    return out


def keep(found: Kept, fields: dict[str, str], reading: Any) -> None:
    """Keep a telemetry.jsonl reading's time and the value its case's rows need (validator.py hands each in)."""
    case = reading.get("case_id") if isinstance(reading, dict) else None
    field = fields.get(case) if isinstance(case, str) else None
    if field is None or not is_number(reading.get("t")):
        return
    times, values = found.setdefault(case, (array("d"), array("d")))
    times.append(float(reading["t"]))
    values.append(float(reading[field]) if is_number(reading.get(field)) else math.nan)  # NaN: the reading failed


def _same(a: Any, b: Any) -> bool:
    """Equal, numbers within the re-derivation tolerance, lists element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b or (is_number(a) and is_number(b) and close(a, b))


def _differs(name: str, stated: Any, want: Any, where: str) -> list[str]:
    if _same(stated, want):
        return []
    return [f"{where}: energy.{name} {stated!r} is not what telemetry.jsonl and samples.jsonl give ({want!r})"]


def energy_problems(row: dict[str, Any], rec: dict[str, Any] | None, readings: Kept, where: str) -> list[str]:
    e = row.get("energy")
    if isinstance(e, dict) and (e.get("tdp_w") is None) != (e.get("tdp_source") is None):
        return [f"{where}: energy.tdp_w {e.get('tdp_w')!r} with tdp_source {e.get('tdp_source')!r}: a TDP is "
                "stated with the document it was read from, or not at all"]
    if not isinstance(e, dict) or e.get("source") not in KINDS:
        if isinstance(e, dict) and e.get("energy_j") is not None:
            return [f"{where}: energy.energy_j {e['energy_j']!r} but the source is {e.get('source')!r}"]
        return []
    intervals = (rec or {}).get("intervals")
    if not isinstance(intervals, list) or not intervals:
        return [f"{where}: energy measured ({e['source']}) but samples.jsonl holds no intervals to re-derive it from"]
    kind = KINDS[e["source"]][1]
    times, values = readings.get(str(row.get("case_id")), ((), ()))
    points = [(t, None if math.isnan(v) else v) for t, v in zip(times, values, strict=True)]
    t = row.get("time_s") if isinstance(row.get("time_s"), dict) else {}
    steady = row.get("steady_state") if isinstance(row.get("steady_state"), dict) else None
    window, said = steady_intervals(intervals, steady)
    if e.get("window") not in (None, said):
        return [f"{where}: energy.window {e.get('window')!r} is not the row's ({said!r})"]
    parts = groups(intervals, (rec or {}).get("repeats"), steady)
    want = figures(kind, points, window, e.get("wrap_j"), e.get("max_gap_s"),
                   t.get("median"), row.get("throughput"), row.get("tflops"), e.get("power_limit_w"), parts,
                   tdp_w=e.get("tdp_w") if is_number(e.get("tdp_w")) else None)
    if "reason" in want:
        return [f"{where}: energy.energy_j {e.get('energy_j')!r} but {want['reason']}"]
    out = [p for name in (*FIGURES, *CIS) for p in _differs(name, e.get(name), want.get(name), where)]
    for name in (*PER_TOKEN, "j_per_token_ci95"):
        stated, wanted = e.get(name) or {}, want.get(name) or {}
        if set(stated) != set(wanted):
            out.append(f"{where}: energy.{name} counts {sorted(stated)} where the row's throughput gives "
                       f"{sorted(wanted)}")
            continue
        out += [p for k in wanted for p in _differs(f"{name}.{k}", stated[k], wanted[k], where)]
    return out
