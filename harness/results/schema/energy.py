"""The energy record of a row: what its timed calls took, where the figure came from, and per call, token and watt.

Declared here, beside the other nested records of parts.py; row.py assembles it into the row (see types.py for why
msgspec).
"""

from typing import Literal

from xmfu.harness.results.schema.types import AnyMap, NonNeg, Positive, Record, doc, maybe


class Energy(Record, kw_only=True):
    """The energy this row's timed calls took, where it came from, and the figures per call, token and watt
    (harness/results/statistics/energy.py; docs/energy.md)."""

    source: doc(Literal["counter", "integrated power", "not measured"],
                "counter: a cumulative energy counter read around the calls; integrated power: power readings "
                "integrated (trapezoid) over the calls; not measured: `reason` says why")
    scope: doc(Literal["device", "cpu package", "node"], "what the figure covers: one accelerator's board "
                                                          "(device), a CPU's RAPL packages, or a whole node")
    reason: maybe(str, "why not measured, why the counter was not used, or a caveat") = None
    counter: maybe(str, "the counter read (its query and unit)") = None
    counter_check: maybe(AnyMap, "the start-up check of the counter against power x time (ratio, expected_j, "
                                 "measured_j, reason); null where none ran") = None
    window: maybe(str, "the calls the energy is taken over: every timed call, or (timing=sustained) those from the "
                       "start of the steady state on") = None
    wrap_j: maybe(Positive, "counter: its range in J, where it wraps around (RAPL max_energy_range_uj)") = None
    max_gap_s: maybe(Positive, "integrated power: readings further apart are a gap (nothing assumed in it)") = None
    timed_s: doc(float, "seconds of the timed window: the sum of the row's sample intervals", ge=0) = 0.0
    covered_s: doc(float, "seconds of the timed window the readings cover", ge=0) = 0.0
    readings: doc(int, "readings of the case used", ge=0) = 0
    gaps: doc(int, "integrated power: consecutive readings further apart than the largest gap allowed", ge=0) = 0
    energy_j: maybe(NonNeg, "J over the timed window: mean_power_w x timed_s") = None
    mean_power_w: maybe(NonNeg, "J over the covered part of the window / covered_s, W") = None
    j_per_call: maybe(NonNeg, "mean_power_w x time_s.median: J per call (per step for training)") = None
    j_per_token: maybe(dict[str, NonNeg], "mean_power_w / tokens per s, per token kind (tokens: training; "
                                          "prompt_tokens: prefill; generated_tokens: decode)") = None
    tokens_per_s_per_w: maybe(dict[str, NonNeg], "tokens per s / mean_power_w, per token kind") = None
    tflops_per_w: maybe(NonNeg, "tflops / mean_power_w") = None
    mean_power_w_ci95: maybe(list[float], "the 95% CI of mean power over independent parts of the window (repeats, "
                                          "or a sustained row's steady windows); null: point figures") = None
    j_per_call_ci95: maybe(list[float], "j_per_call at the ends of mean_power_w_ci95") = None
    j_per_token_ci95: maybe(dict[str, list[float]], "j_per_token at the ends of mean_power_w_ci95") = None
    power_limit_w: maybe(Positive, "the enforced power limit read from the device, W") = None
    power_limit_fraction: maybe(NonNeg, "mean_power_w / power_limit_w") = None
    tdp_w: maybe(Positive, "the part's board power (TDP/TGP), W: the peak table's sourced `tdp`, or null") = None
    tdp_source: maybe(str, "the vendor document tdp_w was read from, and where") = None
    tdp_note: maybe(str, "why tdp_w is null") = None
    tdp_fraction: maybe(NonNeg, "mean_power_w / tdp_w: the share of its rated board power the device drew") = None
    ci: doc(str, "how uncertain the figures are: point figures (one window) unless stated") = "point figures"
