"""MFU of a row whose FLOPs run in several formats (an fp8 training step: fp8 linear layers, bf16 elsewhere).

The same run is a different fraction of a bf16 peak and of an fp8 peak (Megatron-Bridge's GB300 Llama 3 70B FP8
table: one 2,348 TFLOP/s figure is "94%" or "47%"), so such a row states both, each with its denominator:
- against the FLOP-weighted peak of the formats it used: the time the step's FLOPs take at peak, every format's
  FLOPs at that format's peak, over the measured time. Σ_f flops_f / peak_f is that time at peak, so the peak it
  divides by is Σ flops / Σ_f (flops_f / peak_f): the FLOP-weighted harmonic mean of the formats' peaks (the
  arithmetic mean would credit the bf16 FLOPs with the fp8 rate);
- against the bf16 peak: every FLOP counted at the bf16 rate, the figure a bf16 run of the same model states, the
  one to compare across formats.
"""

from xmfu.harness.results.schema.types import NonNeg, Positive, Record, doc, maybe


class FormatMfu(Record, kw_only=True):
    """MFU against the FLOP-weighted peak of the formats used and against the bf16 peak, with both denominators."""

    peak_tflops: doc(dict[str, Positive | None], "each format's dense peak for the device, TFLOP/s (the peak table; "
                                                 "null where it has none: peak_notes say why)")
    peak_notes: doc(dict[str, str], "why a format's peak is null, or a caveat about it (empty: none)")
    weighted_peak_tflops: maybe(Positive, "sum of flops_by_format / sum over formats of flops / peak: the "
                                          "FLOP-weighted (harmonic) peak of the formats used; null where a "
                                          "format used has no peak")
    mfu_weighted: maybe(NonNeg, "tflops / weighted_peak_tflops; null with mfu_weighted_reason")
    mfu_weighted_denominator: doc(str, "the denominator of mfu_weighted, in words: each format's share of the "
                                       "FLOPs and its peak")
    mfu_weighted_reason: maybe(str, "why mfu_weighted is null; null when it is not")
    mfu_bf16: maybe(NonNeg, "tflops / the bf16 peak (every FLOP at the bf16 rate); null with mfu_bf16_reason")
    mfu_bf16_denominator: doc(str, "the denominator of mfu_bf16, in words")
    mfu_bf16_reason: maybe(str, "why mfu_bf16 is null; null when it is not")

    def words(self) -> str:
        """Both figures, each with its denominator: what the end table's note and the verdict page say."""
        bf16 = (f"MFU {_pct(self.mfu_bf16)} of {self.mfu_bf16_denominator}" if self.mfu_bf16 is not None
                else f"MFU against the bf16 peak: n/a ({self.mfu_bf16_reason})")
        weighted = (f"{_pct(self.mfu_weighted)} of {self.mfu_weighted_denominator}" if self.mfu_weighted is not None
                    else f"against the FLOP-weighted peak of the formats used: n/a ({self.mfu_weighted_reason})")
        return f"{bf16}; {weighted}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _share(flops: float, total: float) -> str:
    return f"{100 * flops / total:.1f}%" if total else "0%"


def _peak_text(peak: float | None) -> str:
    return f"{peak:.6g} TFLOP/s" if peak is not None else "no peak"


def derive(tflops: float | None, flops_by_format: dict[str, float], peaks: dict[str, float | None],
           notes: dict[str, str], invalid_timing: str | None) -> dict[str, object]:
    """The FormatMfu fields of a row from its TFLOP/s, FLOPs per format and each format's peak (`notes`: why a peak
    is null). One definition: the engine writes the row with it and `xmfu validate` re-derives the row with it."""
    total = sum(flops_by_format.values())
    used = {f: v for f, v in sorted(flops_by_format.items()) if v > 0}  # sorted: the order a bundle keeps
    missing = [f for f in used if peaks.get(f) is None]
    weighted = None if missing or not used else total / sum(v / peaks[f] for f, v in used.items())
    words = " + ".join(f"{f} {_share(v, total)} of the FLOPs at {_peak_text(peaks.get(f))}" for f, v in used.items())
    bf16 = peaks.get("bf16")
    out: dict[str, object] = {
        "peak_tflops": dict(peaks), "peak_notes": {f: n for f, n in notes.items() if n},
        "weighted_peak_tflops": weighted, "mfu_weighted": None, "mfu_bf16": None,
        "mfu_weighted_denominator": f"the FLOP-weighted peak of the formats used ({words}): "
                                    + (f"{weighted:.6g} TFLOP/s" if weighted else "none"),
        "mfu_bf16_denominator": f"the bf16 peak ({_peak_text(bf16)}), every FLOP at the bf16 rate",
        "mfu_weighted_reason": None, "mfu_bf16_reason": None}
    why = f"timing not valid: {invalid_timing}" if invalid_timing else None if tflops is not None else "no valid time"
    if why is not None:
        out["mfu_weighted_reason"] = out["mfu_bf16_reason"] = why
        return out
    if weighted is None:
        out["mfu_weighted_reason"] = "; ".join(f"no {f} peak: {notes.get(f) or 'not in the peak table'}"
                                               for f in missing) or "no FLOPs"
    else:
        out["mfu_weighted"] = tflops / weighted
    if bf16 is None:
        out["mfu_bf16_reason"] = f"no bf16 peak: {notes.get('bf16') or 'not in the peak table'}"
    else:
        out["mfu_bf16"] = tflops / bf16
    return out
