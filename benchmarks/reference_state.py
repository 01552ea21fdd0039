"""The GPU reference set's output folder (benchmarks/gpu_reference.py): what each part left there and summary.md.

`parts/<part>.json` records a part's last attempt: the bundle it wrote (`<part>.<UTC time>`), sizes, device, command,
budget, exit status, seconds, whether it was stopped, the bundle's status. A part is done where that bundle is in the
folder and valid (xmfu's validator: checksums, schema, every figure re-derived); summary.md and the report are
rebuilt from these files and bundles alone, so several invocations (or jobs) add up to one set.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from reference_parts import PARTS, Part

from xmfu.harness.results.bundle.validator import Loaded, load_bundle

STATES = "parts"  # folder of the per-part state files
SUPERSEDED = "superseded"  # bundles of earlier attempts
STOPPED = {"budget": "stopped at its budget", "interrupted": "interrupted",
           "unrecorded": "the invocation running it ended first (killed?)"}


def read_state(out: Path, name: str) -> dict[str, Any] | None:
    """The part's record; an attempt still `running` on record was cut short with the script (a hard kill): the
    part got SIGTERM as the script died (gpu_reference.DIE_WITH_PARENT), so its bundle may well be valid."""
    try:
        state = json.loads((out / STATES / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    if state.get("status") == "running" and state.get("stopped") is None:
        state["stopped"] = "unrecorded"
    return state


def write_state(out: Path, state: dict[str, Any]) -> None:
    """Atomically: a stop in the middle leaves the old file or the new one, never half of one."""
    folder = out / STATES
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{state['part']}.json.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, folder / f"{state['part']}.json")


def load(out: Path, bundle: str | None) -> Loaded:
    return load_bundle(out / bundle) if bundle else Loaded(None, ["no bundle"])


def done(out: Path, part: Part, sizes: str, device: str) -> tuple[bool, str]:
    """Whether the part's valid bundle, made at these sizes on this device, is in `out`; and what is there."""
    state = read_state(out, part.name)
    if state is None:
        return False, "not run"
    if (state.get("sizes"), state.get("device")) != (sizes, device):
        return False, f"its last bundle was made at {state.get('sizes')} sizes on {state.get('device')}"
    loaded = load(out, state.get("bundle"))
    if loaded.problems or loaded.bundle is None:
        return False, f"no valid bundle ({(loaded.problems or ['unreadable'])[0][:200]})"
    stopped = f", {STOPPED[state['stopped']]}" if state.get("stopped") in STOPPED else ""
    return True, f"{loaded.bundle.manifest.get('status')}{stopped}: {state['bundle']}"


def supersede(out: Path, name: str) -> None:
    """Move the bundles of a part's earlier attempts aside, so that the folder holds one bundle per part."""
    for old in sorted(out.glob(f"{name}.*")):
        if old.is_dir():
            (out / SUPERSEDED).mkdir(exist_ok=True)
            shutil.move(str(old), str(out / SUPERSEDED / old.name))


def achievable_overrides(out: Path, name: str, sizes: str, device: str) -> list[str]:
    """`achievable_tflops=` and `achievable_method=` from the achievable peak the mamf part `name` found, where its
    bundle is done and its sweep finished (the method travels with the figure: it is a denominator); [] if none."""
    if not done(out, next(p for p in PARTS if p.name == name), sizes, device)[0]:
        return []
    found = load(out, (read_state(out, name) or {}).get("bundle")).bundle
    achievable = (found.manifest.get("achievable") or {}) if found else {}
    if not (achievable.get("tflops") and str(achievable.get("source", "")).startswith("mamf")):
        return []
    method = achievable.get("method") or "'not stated'"  # bundles from before the method was recorded
    return [f"achievable_tflops={achievable['tflops']}", f"achievable_method={method}"]


def state_line(out: Path, part: Part) -> str:
    """What `out` holds for the part, whatever sizes and device made it (for --list)."""
    state = read_state(out, part.name)
    if state is None:
        return "not run"
    loaded = load(out, state.get("bundle"))
    if loaded.problems or loaded.bundle is None:
        return f"no valid bundle ({state.get('sizes')} sizes, {state.get('device')})"
    stopped = f", {STOPPED[state['stopped']]}" if state.get("stopped") in STOPPED else ""
    return f"{loaded.bundle.manifest.get('status')}{stopped} ({state.get('sizes')} sizes, {state.get('device')})"


def outcome(state: dict[str, Any]) -> str:
    """One line: the bundle's status, how the attempt ended, its minutes."""
    stopped = f", {STOPPED[state['stopped']]}" if state.get("stopped") in STOPPED else ""
    minutes = f" after {state['seconds'] / 60:.2f} min" if state.get("seconds") is not None else ""
    return f"{state.get('status')}{stopped} (exit {state.get('exit_code')}){minutes}: {state.get('bundle')}"


def _inference_figure(rows: list[dict]) -> str:
    """Per backend: the best prefill MFU and the best decode throughput with its MBU."""
    parts = []
    for backend in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == backend and r["status"] == "ok" and r.get("timing_valid")]
        prefill = max((r for r in mine if r["params"]["phase"] == "prefill"), key=lambda r: r["tflops"] or 0,
                      default=None)
        decode = max((r for r in mine if r["params"]["phase"] == "decode"),
                     key=lambda r: r["throughput"]["generated_tokens_per_s"], default=None)
        if prefill:
            mfu = "MFU not measured" if prefill.get("mfu") is None else f"MFU {100 * prefill['mfu']:.1f}%"
            parts.append(f"{backend} prefill {mfu} (b{prefill['params']['batch']})")
        if decode:
            mbu = "MBU not measured" if decode.get("mbu") is None else f"MBU {100 * decode['mbu']:.1f}%"
            parts.append(f"{backend} decode {decode['throughput']['generated_tokens_per_s']:.4g} tok/s, {mbu} "
                         f"(b{decode['params']['batch']})")
    return "; ".join(parts) or "no timed row"


def figure(rows: list[dict], manifest: dict[str, Any]) -> str:
    """The headline of a bundle: the achievable peak it found, and the best TFLOP/s and MFU per backend, or peak
    busbw."""
    achievable = manifest.get("achievable") or {}
    found = (f"achievable {achievable['tflops']:.4g} TFLOP/s ({achievable.get('case_id')}); "
             if str(achievable.get("source", "")).startswith("mamf") else "")
    if rows and rows[0].get("workload") == "inference":
        return found + _inference_figure(rows)
    best: dict[str, dict] = {}
    for r in rows:
        if r["status"] != "ok" or not r.get("timing_valid"):
            continue
        key = "busbw_gbps" if r.get("busbw_gbps") is not None else "tflops"
        if r.get(key) is not None and r.get(key) > (best.get(r["backend"], {}).get(key) or 0):
            best[r["backend"]] = r
    parts = []
    for backend, r in sorted(best.items()):
        if r.get("busbw_gbps") is not None:
            parts.append(f"{backend} peak busbw {r['busbw_gbps']:.3g} GB/s ({r['params']['op']})")
        else:
            mfu = "MFU not measured" if r.get("mfu") is None else f"MFU {100 * r['mfu']:.1f}%"
            parts.append(f"{backend} {r['tflops']:.3g} TFLOP/s ({mfu}, {r['case_id']})")
    return found + ("; ".join(parts) or "no timed row")


def report_is_current(out: Path, report: Path) -> bool:
    """Whether `report` is newer than every part's record (nothing ran since it was built)."""
    records = list((out / STATES).glob("*.json"))
    return report.exists() and all(r.stat().st_mtime <= report.stat().st_mtime for r in records)


def states(out: Path) -> list[dict[str, Any]]:
    """Every part's last attempt in `out`, in the set's order, with `valid` and its rows and manifest added."""
    found = []
    for part in PARTS:
        state = read_state(out, part.name)
        if state is None:
            continue
        loaded = load(out, state.get("bundle"))
        valid = not loaded.problems and loaded.bundle is not None
        found.append({**state, "valid": valid, "rows": loaded.bundle.raw_rows if valid else [],
                      "manifest": loaded.bundle.manifest if valid else {}})
    return found


def summary(out: Path, device: str, smoke: bool) -> str:
    lines = [f"# xmfu GPU reference set: {device}", "",
             "Smoke sizes on a machine without an accelerator: these figures prove the plumbing only." if smoke
             else "Every figure below comes from the bundle named beside it.",
             "Estimated minutes are estimates for one H100, not measurements (benchmarks/reference_parts.py).", "",
             "| part | what | bundle status | exit | minutes | est. min (H100) | bundle | best per backend |",
             "|---|---|---|---|---|---|---|---|"]
    by_name = {s["part"]: s for s in states(out)}
    needs: dict[str, set[str]] = {}
    for part in PARTS:
        s = by_name.get(part.name)
        if s is None:
            lines.append(f"| {part.name} | {part.what} | not run | | | | | |")
            continue
        est = f"{s['estimate_min']:.1f}" if s.get("estimate_min") is not None else ""
        for r in s["rows"]:
            if r["status"] in ("skipped", "failed"):
                needs.setdefault(f"{part.name}: {r['backend']}", set()).add(r["reason"] or r["status"])
        status = (s["manifest"].get("status") if s["valid"] else "no valid bundle") + (
            f", {STOPPED[s['stopped']]}" if s.get("stopped") in STOPPED else "")
        minutes = f"{s['seconds'] / 60:.1f}" if s.get("seconds") is not None else ""
        headline = figure(s["rows"], s["manifest"]) if s["valid"] else "not measured"
        lines.append(f"| {part.name} | {part.what} | {status} | {s.get('exit_code')} | {minutes} | {est} | "
                     f"{s['bundle'] if s['valid'] else 'none'} | {headline} |")
    if needs:
        lines += ["", "Rows that did not run here, with the reason each backend gave:", ""]
        lines += [f"- {k}: {'; '.join(sorted(v))[:300]}" for k, v in sorted(needs.items())]
    return "\n".join(lines) + "\n"
