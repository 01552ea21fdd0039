"""One row of cases.jsonl: one (case, backend), every figure with its denominator, convention and conditions.

Every key a row can hold is declared here, once, with its meaning, unit and when it is null; a key not declared
here is refused (by the writer as the row is written, and by `xmfu validate`). Fields up to `comparability_key`
are in every row; the others appear where they apply (a workload's own figures, a timed row's timer).
Rows of `xmfu.bundle/1` bundles are rows of this record too: the fields added since then are optional.
"""

from typing import Literal

from msgspec import field

from xmfu.harness.results.schema.energy import Energy
from xmfu.harness.results.schema.formats import FormatMfu
from xmfu.harness.results.schema.parts import (
    Clocks,
    CommDetail,
    Comparability,
    Contention,
    Correctness,
    Imported,
    Latency,
    PluginSource,
    Repeats,
    Roofline,
    Routing,
    ScalingBaseline,
    Speedup,
    SteadyState,
    Sync,
    Telemetry,
    Threads,
    TimedCheck,
    Timer,
    TimeStats,
    Variant,
)
from xmfu.harness.results.schema.types import AnyMap, NonNeg, Positive, Record, RunId, Text, doc, maybe

ROW_STATUSES = ("ok", "skipped", "incorrect", "failed")
Status = Literal[ROW_STATUSES]


class Row(Record, kw_only=True):
    """One (case, backend) of a run."""

    # What was run, where: in every row.
    run_id: RunId
    case_id: doc(Text, "the case (shape, size, model): the same id for every backend of the case")
    workload: doc(Text, "the workload: matmul, attention, transformer, inference, collectives")
    backend: doc(Text, "the implementation (torch, triton, jax, torch_sdpa, torch_compile, torch_dist...)")
    platform: doc(str, "the platform kind: cpu, cuda, rocm, tpu, xpu, hpu, neuron")
    device: doc(str, "the device's name as detected")
    dtype: doc(str, "the data type of the inputs (fp32, tf32, bf16, fp16, fp8)")
    params: doc(AnyMap, "the case's parameters, as its workload defines them (docs/workloads.md)")
    status: doc(Status, "ok (checked, then timed), skipped, incorrect (failed its check, before timing or when the "
                        "last timed output was re-checked after it (timed_check): no time is given) or failed (an "
                        "error; or a median under the roofline's floor, the reason then `invalid: faster than the "
                        "roofline`)")
    reason: maybe(str, "why the status is not ok; null for ok")
    flops: doc(float, "floating-point operations per call under `flop_convention`; 0 for collectives", ge=0)
    flop_convention: doc(str, "how `flops` is counted (e.g. 2mnk; causal-half; palm)")
    bytes: doc(float, "bytes the call moves under the workload's byte model", ge=0)
    time_s: maybe(TimeStats, "time per call; null when not timed (status not ok, or checked but not timed)")
    tflops: maybe(NonNeg, "flops / median time / 1e12; null when not timed or no FLOPs")
    peak_tflops: maybe(Positive, "the datasheet dense peak for (device, dtype), TFLOP/s; null with peak_note")
    peak_source: maybe(str, "where the peak comes from (the datasheet cited in the peak table, or override)")
    mfu: maybe(NonNeg, "tflops / peak_tflops; null with mfu_reason")
    mfu_vs_achievable: maybe(NonNeg, "tflops / achievable_tflops (the best measured matmul); null without one")
    timing_valid: doc(bool, "false where the time does not represent the hardware (Triton's interpreter on a "
                            "CPU...); such rows have no MFU")
    comparability_key: doc(str, "hash of `comparability`: rows compare only when their keys match")

    # Always written since xmfu.bundle/1's later versions.
    phase: maybe(str, "main, or mamf for the achievable-peak sweep run before it") = None
    device_index: maybe(int, "the local device index measured", ge=0) = None
    device_uuid: maybe(str, "the device's UUID where the platform reports one") = None
    device_pci_bus_id: maybe(str, "the device's PCI bus id where the platform reports one") = None
    started: maybe(str, "when the case started, UTC ISO 8601") = None
    finished: maybe(str, "when the row was written, UTC ISO 8601") = None
    timing_note: maybe(str, "why timing_valid is false, or a caveat about the time") = None
    sync: maybe(Sync, "how completion of the timed work was established on this device, with the reason; "
                      "null in rows written before it was recorded") = None
    correctness: maybe(Correctness, "the check against the reference; null where none ran (skipped, failed "
                                    "before the check)") = None
    timed_check: maybe(TimedCheck, "the output of the last timed call re-checked after the timed loop (a cached "
                                   "or deferred output fails it: the row is then incorrect); absent where not "
                                   "timed, and in rows written before it was recorded") = None
    notes: doc(AnyMap, "the backend's notes (library, precision settings, compile times, "
                       "ranks...)") = field(default_factory=dict)
    comparability: maybe(Comparability, "what must match for two rows to be compared") = None
    imported: maybe(Imported, "a row read from another tool's log by `xmfu import`: what it printed and what xmfu "
                              "re-derives from it; absent in xmfu's own rows") = None
    plugin: maybe(PluginSource, "a plug-in backend (docs/backends.md): where its code came from; absent for a "
                                "built-in backend") = None
    stack: maybe(AnyMap, "torch on a GPU: the BLAS, attention, cuDNN and TunableOp settings in force") = None
    versions: maybe(dict[str, str], "the frameworks loaded when the row was written (torch, jax, jaxlib, triton) "
                                    "and their installed versions; validate requires environment.json's packages "
                                    "to state the same; absent in rows written before it was recorded") = None
    clocks_locked: maybe(bool, "whether the device's clocks were locked (see clocks); null unknown") = None
    clocks: maybe(Clocks, "the clock-lock reading behind clocks_locked") = None
    contention: maybe(Contention, "other work on the host and GPU during the case") = None
    threads: maybe(Threads, "a CPU row: its framework's intra-op threads and the OpenMP wait policy; null off "
                            "CPUs") = None
    timer: maybe(Timer, "how it was timed; absent when it was not") = None
    repeats: maybe(Repeats, "repeats > 1: each repeat's median and their spread; null for one measurement") = None
    tflops_ci95: maybe(list[float], "the 95% CI of tflops [low, high] (the time CI mapped through 1/t)") = None
    bandwidth_gbps: maybe(NonNeg, "bytes / median time / 1e9, GB/s") = None
    peak_entry: maybe(str, "the peak table entry used, or override") = None
    peak_note: maybe(str, "why peak_tflops is null, or a caveat about it") = None
    mfu_reason: maybe(str, "why mfu is null (or above 1)") = None
    achievable_tflops: maybe(NonNeg, "the achievable peak mfu_vs_achievable divides by, TFLOP/s") = None
    achievable_method: maybe(str, "a mamf sweep row: how it was timed; a row with achievable_tflops: how that "
                                  "peak was measured. flushed: the cache overwritten before every call "
                                  "(mamf-finder's method, which the published table uses); warm: back-to-back "
                                  "calls; not stated: given as achievable_tflops without achievable_method") = None
    mfu_vs_achievable_reason: maybe(str, "why mfu_vs_achievable is no plain fraction of the achievable figure: the "
                                         "row timed by another method than that figure was measured by (or it "
                                         "states none), or above 1; null: like for like") = None
    roofline: maybe(Roofline, "where the row stands on the roofline: its minimum traffic, bound, speed-of-light "
                              "time and share of it, and the floor no honest time is under; null in rows written "
                              "before it was recorded") = None
    speedup: maybe(Speedup, "against the run's baseline backend; null for the baseline itself, or without "
                            "one") = None
    telemetry: maybe(Telemetry, "power, clocks, temperature over this backend's timed window; null when not "
                                "timed") = None
    energy: maybe(Energy, "the energy of the row's timed calls over exactly their intervals, its source and the "
                          "figures per call, token and watt; null when not timed, and in rows written before it "
                          "was recorded") = None
    attachments: maybe(list[str], "files of the bundle belonging to this row (a profiler trace)") = None
    non_finite_fields: maybe(list[str], "fields a backend returned as NaN or infinity, kept as null") = None
    scale: maybe(Literal["smoke"], "smoke: run at smoke sizes (scale=smoke), not the sizes the command named; "
                                   "absent at full scale") = None
    scale_note: maybe(str, "scale=smoke: what was shrunk (the model preset asked for, the mamf sweep's "
                           "sizes...)") = None

    # Workloads' own figures.
    hardware_flops: maybe(NonNeg, "FLOPs the hardware executes, recomputation included (training with "
                                  "activation checkpointing)") = None
    hfu: maybe(NonNeg, "hardware FLOPs utilization: hardware_flops / time / peak") = None
    throughput: maybe(dict[str, NonNeg], "work units per second at the median time (tokens_per_s, "
                                         "prompt_tokens_per_s, generated_tokens_per_s...)") = None
    peak_memory_bytes: maybe(int, "the device's peak memory in use during the backend's calls, bytes", ge=0) = None
    peak_memory_source: maybe(str, "how peak_memory_bytes was read") = None
    ranks: maybe(int, "processes whose samples were combined", ge=1) = None
    rank_combine: maybe(str, "how ranks' samples were combined per sample index: mean or max") = None
    per_rank_median_s: maybe(list[float], "every rank's median, s") = None
    rank_skew: maybe(NonNeg, "slowest rank's median / median of the ranks' medians") = None
    variants: maybe(dict[str, Variant], "distributed training: no_comm (the step without collectives), "
                                        "comm_alone (the collectives alone)") = None
    steady_state: maybe(SteadyState, "timing.sustain_s > 0: the sustained run's windows") = None
    wrong: maybe(int, "collectives: wrong elements over all ranks (nccl-tests' #wrong)", ge=0) = None
    size_bytes_actual: maybe(int, "collectives: bytes per rank after rounding to whole elements per rank",
                             ge=0) = None
    algbw_gbps: maybe(NonNeg, "collectives: algorithm bandwidth, size / time / 1e9, GB/s") = None
    bus_factor: maybe(NonNeg, "collectives: nccl-tests' bus bandwidth factor for the operation and rank count") = None
    busbw_gbps: maybe(NonNeg, "collectives: algbw x bus_factor, GB/s; null for one rank") = None
    busbw_note: maybe(str, "collectives: why busbw_gbps is null") = None
    weights_bytes: maybe(int, "inference: bytes of the model's weights", ge=0) = None
    kv_cache_bytes: maybe(int, "inference: bytes of the KV cache at its full length", ge=0) = None
    ttft_s: maybe(Latency, "inference prefill: time to first token percentiles") = None
    tpot_s: maybe(Latency, "inference decode: time per output token percentiles") = None
    mbu: maybe(NonNeg, "inference decode: memory-bandwidth utilization, bytes / time / peak_membw_gbps") = None
    mbu_reason: maybe(str, "why mbu is null") = None
    peak_membw_gbps: maybe(Positive, "the device's peak memory bandwidth, GB/s") = None
    peak_membw_source: maybe(str, "where peak_membw_gbps comes from") = None
    peak_membw_entry: maybe(str, "the peak table entry used, or override") = None
    peak_membw_note: maybe(str, "why peak_membw_gbps is null") = None
    flops_global: maybe(NonNeg, "distributed training: flops x world size, per step") = None
    peak_memory_per_rank_bytes: maybe(list[int | None], "distributed training: every rank's peak memory") = None
    scaling_efficiency: maybe(NonNeg, "distributed training: MFU per device / the single-device step's") = None
    scaling_note: maybe(str, "why scaling_efficiency is null, or why it is not credible (above 1)") = None
    scaling_credible: maybe(bool, "false: scaling_efficiency is above 1 (scaling_note says why that is not "
                                  "credible); null without a scaling_efficiency") = None
    scaling_baseline: maybe(ScalingBaseline, "the single-device step it is measured against") = None
    comm_bytes_per_rank: maybe(NonNeg, "distributed training: bytes each rank sends per step (torch: the "
                                       "strategy's schedule as it issues it; JAX: the collectives XLA "
                                       "compiled)") = None
    comm_bytes_formula: maybe(str, "the formula behind comm_bytes_per_rank") = None
    comm_exposed_s: maybe(float, "step time not hidden behind computation, s") = None
    comm_total_s: maybe(NonNeg, "the step's collectives timed alone, s") = None
    comm_achieved_gbps: maybe(NonNeg, "comm_bytes_per_rank / comm_total_s / 1e9, GB/s") = None
    overlap: maybe(float, "1 - exposed / total, clamped to [0, 1]", ge=0, le=1) = None
    comm: maybe(CommDetail, "how the communication figures were measured") = None
    flops_by_format: maybe(dict[str, NonNeg], "a step whose GEMMs run in several formats (fp8 training): `flops` "
                                              "split by format (fp8, bf16), summing to it") = None
    mfu_formats: maybe(FormatMfu, "with flops_by_format: MFU against the FLOP-weighted peak of the formats used "
                                  "and against the bf16 peak, each with its denominator") = None
    routing: maybe(Routing, "mixture-of-experts training: the routing imbalance, per step") = None
