"""Re-deriving the figures a row states about sample series beside its headline time: its variants' time
statistics (a distributed step without its collectives, the collectives alone) and a sustained run's steady-state
windows, from the raw samples samples.jsonl holds for them. `xmfu validate` calls these through validator.py;
each returns problems naming the field, the value stated and the value re-derived (rederive.py's conventions).
"""

from __future__ import annotations

from typing import Any

from xmfu.harness.results.rederive.times import Settings, close, same, stats_problems
from xmfu.harness.results.statistics.steady_windows import settle, window_figures, window_median


def _groups(values: list[Any], *candidates: Any) -> list[int] | None:
    """The first repeat list that gives each sample its repeat, or None."""
    return next((c for c in candidates if isinstance(c, list) and c and len(c) == len(values)), None)


def variant_problems(row: dict[str, Any], rec: dict[str, Any], s: Settings, where: str) -> list[str]:
    """Each variant's time_s against its own samples (samples.jsonl `variants.<name>.samples`), as the runner's
    `_variant_fields` computes it (statistics.summary.summarize), and its per-rank medians against its rank samples."""
    variants = row.get("variants")
    if not isinstance(variants, dict):
        return []
    stored = rec.get("variants") if isinstance(rec.get("variants"), dict) else {}
    out = []
    for name, v in variants.items():
        if not isinstance(v, dict) or v.get("time_s") is None:
            continue
        raw = stored.get(name) if isinstance(stored.get(name), dict) else {}
        values = raw.get("samples")
        label = f"variants.{name}.time_s"
        if not isinstance(values, list):
            out.append(f"{where}: {label} is stated but samples.jsonl holds no samples for variant {name}")
            continue
        # A variant's own repeats (xmfu.bundle/2 since they were written); else the step's, where they align (a
        # variant shares the step's sampling plan); else only the figures that do not depend on them.
        groups = _groups(values, raw.get("repeats"), rec.get("repeats"))
        several = len(set(rec.get("repeats") or [])) > 1
        out += stats_problems(v["time_s"], values, groups, s, where, label, f"samples.jsonl variants.{name}",
                              grouped=groups is not None or not several)
        out += _rank_medians(v.get("per_rank_median_s"), raw.get("rank_samples"), where, f"variants.{name}")
    return out


def _rank_medians(stated: Any, ranks: Any, where: str, label: str) -> list[str]:
    if not isinstance(stated, list) or not isinstance(ranks, list) or not all(isinstance(r, list) and r
                                                                             for r in ranks):
        return []
    want = [window_median(r) for r in ranks]
    if same(stated, want):
        return []
    return [f"{where}: {label}.per_rank_median_s {stated} is not the medians of its rank samples ({want})"]


def steady_problems(row: dict[str, Any], rec: dict[str, Any], s: Settings, where: str) -> list[str]:
    """A sustained row's steady state re-derived from its samples: the windows (in time order) hold consecutive
    runs of samples.jsonl's samples of their stated counts (harness/engine/steady.py cuts them by start time, so a
    window's samples are consecutive); each window's median and TFLOP/s from its run, and the settled result from
    the windows by the run's own rule (steady_windows.settle). The windows' clock and power means come from
    telemetry the bundle holds without the samples' start times, and are taken as stated."""
    st, values = row.get("steady_state"), rec.get("samples")
    if not isinstance(st, dict) or not isinstance(values, list):
        return []
    windows = st.get("windows")
    if not isinstance(windows, list) or not windows or not all(isinstance(w, dict) for w in windows):
        return [f"{where}: steady_state has no windows"]
    out = _settings_problems(st, s, where)
    counts = [w.get("n") for w in windows]
    if not all(isinstance(n, int) and n > 0 for n in counts) or sum(counts) != len(values):
        return [*out, f"{where}: steady_state.windows' sample counts {counts} do not cut the row's "
                      f"{len(values)} samples in samples.jsonl"]
    window_s, flops = st.get("window_s"), row.get("flops") or 0.0
    redone, start = [], 0
    for w, n in zip(windows, counts, strict=True):
        figures = window_figures(window_median(values[start:start + n]), flops)
        start += n
        redone.append({**w, **figures})
        label = f"steady_state.windows[{w.get('index')}]"
        for key, want in figures.items():
            if not same(w.get(key), want):
                out.append(f"{where}: {label}.{key} {w.get(key)} is not its {n} samples' ({want})")
        if isinstance(w.get("index"), int) and isinstance(window_s, (int, float)) \
                and not close(w.get("start_s"), w["index"] * window_s):
            out.append(f"{where}: {label}.start_s {w.get('start_s')} is not index x window_s "
                       f"({w['index'] * window_s})")
    indices = [w.get("index") for w in windows]
    if not all(isinstance(i, int) for i in indices) or indices != sorted(set(indices)):
        return [*out, f"{where}: steady_state.windows' indices {indices} are not increasing"]
    if isinstance(window_s, (int, float)) and isinstance(st.get("tolerance"), (int, float)) and window_s > 0:
        want = settle(redone, window_s, st["tolerance"])
        for key in ("reached_after_s", "reached", "first_window", "steady_window", "first_vs_steady_time_change"):
            if not same(st.get(key), want[key]):
                out.append(f"{where}: steady_state.{key} {st.get(key)} is not what its windows give ({want[key]})")
    return out


def _settings_problems(st: dict[str, Any], s: Settings, where: str) -> list[str]:
    out = []
    for key, want in (("window_s", s.window_s), ("tolerance", s.steady_tolerance)):
        if want is not None and not close(st.get(key), want):
            out.append(f"{where}: steady_state.{key} {st.get(key)} is not config.yaml's timing setting ({want})")
    return out



