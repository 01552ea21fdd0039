"""Public references from references.yaml: what others measured on the same part, each with its source, and
the band a figure of xmfu's falls in against one.

A reference matches a figure only when the device id (the peak table's), the figure's kind and every condition
the reference names (dtype, model, sequence length, world size, nodes, op, ranks, phase, batch) are equal: a near match
(another dtype, another sequence length, another part of the same family) is no match, and the figure then has
"no public reference". Where the source counts FLOPs under another convention than xmfu's, the entry carries
the conversion, which `conversion_problems` recomputes (tests/machine/test_references.py runs it on every entry).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

REFERENCES_FILE = Path(__file__).with_name("references.yaml")

# What each kind of reference is compared with, in xmfu's headline figures (the verdict page, `xmfu report`).
FIGURES = {
    "matmul_achievable": "the achievable (mamf) matmul TFLOP/s: the best over a sweep of shapes on one device",
    "training_tokens": "training tokens/s per device for a named model, sequence length, dtype and world size",
    "collective_busbw": "a collective's peak bus bandwidth over the sizes swept, for an op, rank and node count",
    "attention": "attention TFLOP/s of the fastest backend at one shape (q = kv length), mode, dtype and mask",
    "energy_per_token": "J per token of one phase (decode: generated tokens; prefill: prompt tokens; training: a "
                        "step's tokens) for a named model, batch, dtype and world size, on one device's energy",
}
# The conditions each kind must name, all of which a figure must equal (no near matches).
MATCHED_ON = {
    "matmul_achievable": ("dtype", "world_size"),
    "training_tokens": ("model", "seq_len", "dtype", "world_size", "nodes"),
    "collective_busbw": ("op", "ranks", "nodes"),
    # the attention rows' own param names (workloads/attention/spec.py AttentionCase.params), seq_len = seq_q = seq_kv
    "attention": ("mode", "dtype", "batch", "heads", "kv_heads", "seq_len", "head_dim", "causal", "world_size"),
    # batch: sequences generated together (an inference row's `batch`; a serving benchmark's maximum batch size)
    "energy_per_token": ("model", "phase", "batch", "dtype", "world_size"),
}
# Figures where less is better (J per token): their ratio is the reference over xmfu's figure, so that a ratio below 1
# is worse than the reference for every kind and the same bands apply.
LOWER_IS_BETTER = frozenset({"energy_per_token"})
ENERGY_PHASES = ("decode", "prefill", "training")
# What an energy entry must say about its energy (docs/energy.md "Limits": device power is not wall power).
ENERGY_FIELDS = ("scope", "window", "tokens")
WITHIN, LOW, FAR_BELOW = "within", "low", "far below"
NO_REFERENCE = "no public reference"


def _transformer(attention_factor: float, params: str = "non_embedding_params") -> Any:
    """FLOPs per token x tokens/s, in TFLOP/s: 6·N_non-embedding + factor·L·H·Dh·S per token (PaLM appendix B:
    factor 12, every attention score; Megatron-LM's causal count halves it: 6). The same formula as xmfu's
    transformer spec (workloads/transformer/spec.py `_attention_per_token`). A mixture of experts counts the
    parameters one token multiplies (`params` = active_non_embedding_params: top_k routed experts, the shared ones,
    the router, attention), as xmfu's spec does (TrainSpec.global_flops, docs/workloads.md)."""
    def convert(i: Mapping[str, float]) -> float:
        per_token = 6 * i[params] + attention_factor * i["n_layers"] * i["n_heads"] * i["head_dim"] * i["seq_len"]
        return i["tokens_per_s"] * per_token / 1e12
    return convert


# Passes per attention mode, in forward FLOPs: backward = 2.5x forward (four matmuls plus recomputing Q Kᵀ),
# as xmfu's attention spec (workloads/attention/spec.py AttentionCase.flops) and the FlashAttention-2 paper §4.
_ATTENTION_PASSES = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}


def _scores(count: str, seq: float, causal: bool) -> float:
    """Score entries per (batch, head) at seq_q = seq_kv = seq. exact: the entries a causal mask keeps, diagonal
    included, s(s+1)/2 (xmfu's `exact`); fa2: half the square, s²/2 (xmfu's `fa2`, FlashAttention-2's benchmark and
    aiter's fwd benchmark after ROCm/aiter PR #3390); full: the square, mask or not (aiter's bwd benchmark at PR
    #815). Without a mask every count is s²."""
    if not causal:
        return seq * seq
    return {"exact": seq * (seq + 1) / 2, "fa2": seq * seq / 2, "full": seq * seq}[count]


def _attention(count: str) -> Any:
    """Attention TFLOP/s under the score count `count`: 4·b·h·d FLOPs per score entry (two matmuls, h = query
    heads) x the mode's passes, over the source's time: its printed `time_ms`, or, where it printed only TFLOP/s,
    the time those imply under the count it used (`printed_count`)."""
    def flops(i: Mapping[str, Any], c: str) -> float:
        return (4 * i["batch"] * i["heads"] * i["head_dim"] * _scores(c, i["seq_len"], bool(i["causal"]))
                * _ATTENTION_PASSES[i["mode"]])

    def convert(i: Mapping[str, Any]) -> float:
        seconds = (i["time_ms"] / 1e3 if "time_ms" in i
                   else flops(i, i["printed_count"]) / (i["printed_tflops"] * 1e12))
        return flops(i, count) / seconds / 1e12
    return convert


# Named conversions an entry may use: pure functions of the entry's `inputs`.
CONVERSIONS = {"transformer-palm": _transformer(12.0), "transformer-causal": _transformer(6.0),
               "moe-palm": _transformer(12.0, "active_non_embedding_params"),
               "moe-causal": _transformer(6.0, "active_non_embedding_params"),
               "scale": lambda i: i["value"] * i["factor"],
               # J/token as mean power over token throughput, both over the same window (W / (tokens/s) = J/token)
               "power-over-throughput": lambda i: i["power_w"] / i["tokens_per_s"],
               "attention-exact": _attention("exact"),
               "attention-fa2": _attention("fa2"), "attention-full": _attention("full")}
# The attention conventions of xmfu's rows (their `flop_convention`) and the conversion giving a reference under each.
ATTENTION_CONVENTIONS = {"exact": "attention-exact", "fa2": "attention-fa2"}


@dataclass(frozen=True)
class Bands:
    """ratio >= within: within the band; >= far_below: low; below: far below (a finding)."""

    within: float = 0.95
    far_below: float = 0.85

    def of(self, ratio: float) -> str:
        return WITHIN if ratio >= self.within else LOW if ratio >= self.far_below else FAR_BELOW

    def check(self) -> str | None:
        """Why these bands are unusable, or None."""
        if not (0 < self.far_below <= self.within <= 1.5) or not all(map(math.isfinite, (self.within,
                                                                                          self.far_below))):
            return (f"bands within={self.within:g}, far_below={self.far_below:g}: need 0 < far_below <= within "
                    "(fractions of the reference, e.g. 0.95 and 0.85)")
        return None


@lru_cache(maxsize=2)
def load_table(path: Path = REFERENCES_FILE) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    data["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return data


def default_bands(table: Mapping[str, Any] | None = None) -> Bands:
    b = (table or load_table())["bands"]
    return Bands(float(b["within"]), float(b["far_below"]))


def entries(table: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    return list((table or load_table())["references"])


def _round_to(result: float) -> float:
    """Half a unit of the last decimal the entry writes (836.9 -> 0.05): how far a recomputation may differ."""
    text = repr(float(result))
    decimals = len(text.split(".")[1]) if "." in text and not text.endswith(".0") else 0
    return 0.5 * 10 ** -decimals


def conversion_problems(entry: Mapping[str, Any]) -> list[str]:
    """What does not recompute in an entry's conversions (and its printed figure, where one conversion is under
    the printed convention): [] when every one does."""
    problems = []
    for c in entry.get("conversions") or []:
        formula = CONVERSIONS.get(c.get("formula"))
        if formula is None:
            problems.append(f"{entry['id']}: unknown conversion {c.get('formula')!r}; known: {', '.join(CONVERSIONS)}")
            continue
        got = formula(c["inputs"])
        if abs(got - c["result"]) > _round_to(c["result"]) + 1e-9:
            problems.append(f"{entry['id']}: {c['formula']} gives {got:.6g}, the entry says {c['result']}")
        printed = entry.get("printed") or {}
        if printed.get("convention") == c["formula"] and abs(got - printed["value"]) > _round_to(printed["value"]):
            problems.append(f"{entry['id']}: {c['formula']} gives {got:.6g}, the source printed {printed['value']}")
    return problems


def entry_problems(entry: Mapping[str, Any], device_ids: Sequence[str]) -> list[str]:
    """Everything an entry must have: a peak-table device, a known figure with all its matched conditions, a
    positive value, a source with a URL, a read date and what was read, and conversions that recompute."""
    eid = entry.get("id", "?")
    problems = []
    if entry.get("device") not in device_ids:
        problems.append(f"{eid}: device {entry.get('device')!r} is not a peak-table id")
    figure = entry.get("figure")
    if figure not in FIGURES:
        problems.append(f"{eid}: figure {figure!r} is not one of {', '.join(FIGURES)}")
    else:
        missing = [k for k in MATCHED_ON[figure] if (entry.get("conditions") or {}).get(k) is None]
        if missing:
            problems.append(f"{eid}: conditions lack {', '.join(missing)}")
        elif figure == "attention":
            problems += _attention_problems(entry)
        elif figure == "energy_per_token":
            problems += _energy_problems(entry)
    if not isinstance(entry.get("value"), (int, float)) or not entry["value"] > 0:
        problems.append(f"{eid}: value {entry.get('value')!r} is not a positive number")
    source = entry.get("source") or {}
    for key in ("url", "read", "what"):
        if not str(source.get(key) or "").strip():
            problems.append(f"{eid}: source lacks {key}")
    if not str(source.get("url", "")).startswith("https://"):
        problems.append(f"{eid}: source url {source.get('url')!r} is not an https address")
    for key in ("unit", "energy" if figure == "energy_per_token" else "flop_convention"):
        if not entry.get(key):
            problems.append(f"{eid}: no {key}")
    return problems + conversion_problems(entry)


def _attention_problems(entry: Mapping[str, Any]) -> list[str]:
    """An attention entry's value is under xmfu's default count (exact); a causal one says so with an
    attention-exact conversion equal to its value, and every conversion's inputs are its own conditions."""
    eid, cond, out = entry["id"], entry["conditions"], []
    for c in entry.get("conversions") or []:
        differ = [k for k in ("mode", "batch", "heads", "seq_len", "head_dim", "causal")
                  if str((c.get("inputs") or {}).get(k)) != str(cond[k])]
        if differ:
            out.append(f"{eid}: {c.get('formula')} inputs {', '.join(differ)} are not the entry's conditions")
    if cond["causal"]:
        exact = [c for c in entry.get("conversions") or [] if c.get("formula") == "attention-exact"]
        if not exact or abs(exact[0]["result"] - entry["value"]) > 1e-9:
            out.append(f"{eid}: a causal attention value must be its attention-exact conversion's result")
    return out


def _energy_problems(entry: Mapping[str, Any]) -> list[str]:
    """An energy entry is J per token of a known phase, and says what its energy covers (scope: whose power; window:
    when; tokens: which tokens it divides by), since a figure of another scope or window is another quantity."""
    eid, out = entry["id"], []
    if entry["conditions"]["phase"] not in ENERGY_PHASES:
        out.append(f"{eid}: phase {entry['conditions']['phase']!r} is not one of {', '.join(ENERGY_PHASES)}")
    if entry.get("unit") != "J/token":
        out.append(f"{eid}: unit {entry.get('unit')!r} is not J/token")
    energy = entry.get("energy")
    missing = [k for k in ENERGY_FIELDS if not str((energy or {}).get(k) or "").strip()] if isinstance(
        energy, Mapping) else list(ENERGY_FIELDS)
    if missing:
        out.append(f"{eid}: energy lacks {', '.join(missing)}")
    return out


def value_under(entry: Mapping[str, Any], convention: str | None) -> float | None:
    """The reference's figure under the FLOP convention of the xmfu figure compared with it, or None where the
    entry gives none. An attention entry's value is under `exact`; a causal one is given under `fa2` by its
    attention-fa2 conversion (the two differ by the diagonal: (s+1)/s); without a mask they are the same count."""
    if entry["figure"] != "attention" or not entry["conditions"].get("causal") or convention == "exact":
        return float(entry["value"])
    name = ATTENTION_CONVENTIONS.get(convention or "")
    c = next((c for c in entry.get("conversions") or [] if c["formula"] == name), None) if name else None
    return float(c["result"]) if c else None


def find(figure: str, device: str | None, conditions: Mapping[str, Any],
         table: Mapping[str, Any] | None = None) -> tuple[dict[str, Any] | None, str]:
    """The reference for a figure of kind `figure` on peak-table id `device` under `conditions`, or None with why.
    Every condition the reference's kind is matched on must be known and equal."""
    if not device:
        return None, f"{NO_REFERENCE} (the device is not a peak-table entry)"
    keys = MATCHED_ON[figure]
    unknown = [k for k in keys if conditions.get(k) is None]
    if unknown:
        return None, f"{NO_REFERENCE} (the figure does not record {', '.join(unknown)})"
    for e in entries(table):
        if e["figure"] == figure and e["device"] == device and all(
                str(e["conditions"][k]) == str(conditions[k]) for k in keys):
            return e, ""
    said = ", ".join(f"{k} {conditions[k]}" for k in keys)
    return None, f"{NO_REFERENCE} for {device}, {said}"


def judge(value: float, ci: Sequence[float] | None, entry: Mapping[str, Any], bands: Bands,
          reference: float | None = None) -> dict[str, Any]:
    """The ratio of xmfu's figure to the reference (of the reference to xmfu's for a figure where less is better,
    LOWER_IS_BETTER; `reference`: the entry's value under the figure's FLOP convention, value_under; default its
    value), its CI (the figure's own CI over the reference: a published
    figure carries none), and the band of the ratio."""
    ref = float(entry["value"]) if reference is None else reference
    ratio_ci = [ci[0] / ref, ci[1] / ref] if ci and None not in ci else None
    ratio = value / ref
    if entry["figure"] in LOWER_IS_BETTER:  # less is better: the reference over xmfu's figure (CI ends swap)
        ratio, ratio_ci = ref / value, [ref / ci[1], ref / ci[0]] if ratio_ci else None
    return {"reference_id": entry["id"], "reference": ref, "reference_unit": entry["unit"], "ratio": ratio,
            "ratio_ci95": ratio_ci, "band": bands.of(ratio), "source": source_text(entry),
            "context": entry.get("context", "")}


def source_text(entry: Mapping[str, Any]) -> str:
    s = entry["source"]
    return f"{s['url']} (read {s['read']})"
