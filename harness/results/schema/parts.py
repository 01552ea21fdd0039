"""The nested records of a row: time statistics, the timer, the correctness check, a speedup, telemetry, the
conditions of the measurement, and the figures of repeats, variants, steady state and distributed steps (energy's
record: energy.py).

Each is declared once here; row.py assembles them into the row (see types.py for why msgspec).
"""

from typing import Literal

from msgspec import field

from xmfu.harness.results.schema.types import AnyMap, NonNeg, OpenRecord, Positive, Record, Text, doc, maybe


class TimeStats(Record, kw_only=True):
    """Statistics of the per-call times (seconds) of one (case, backend): every sample, all repeats pooled."""

    n: doc(int, "number of samples", ge=1)
    median: doc(float, "median time per call, s: the figure every rate is computed from", gt=0)
    mean: doc(float, "mean time per call, s", gt=0)
    min: doc(float, "fastest sample, s", ge=0)
    max: doc(float, "slowest sample, s", gt=0)
    p10: doc(float, "10th percentile, s", ge=0) = 0.0
    p90: doc(float, "90th percentile, s", ge=0) = 0.0
    p99: doc(float, "99th percentile, s", ge=0) = 0.0
    ci95_low: doc(float, "lower end of the 95% confidence interval of the median, s", ge=0)
    ci95_high: doc(float, "upper end of the 95% confidence interval of the median, s", ge=0)
    cv: doc(float, "coefficient of variation (standard deviation / mean)", ge=0) = 0.0
    ci_method: doc(str, "how the interval was computed: binomial order statistics of the median (one repeat); "
                        "two-stage bootstrap over repeats; bootstrap of the median (rows written before issue 42, "
                        "and those that state no method)") = ""


class Timer(Record, kw_only=True):
    """How the time was taken and why sampling stopped."""

    name: maybe(str, "timer used (cuda events, jax block_until_ready, perf_counter...); null: not timed")
    inner: maybe(int, "back-to-back calls per sample (each sample is their mean); null: not timed", ge=1)
    stop: doc(str, "why sampling stopped (CI target met, time budget, max samples), or why it never started")
    ci_target_met: maybe(bool, "whether the CI half-width target was reached; null: not timed") = None
    inner_note: maybe(str, "why `inner` is what it is, where it was limited") = None
    host_launch_s: maybe(float, "host time to issue one call, s; null: not measured for this timer", ge=0) = None
    launch_bound: maybe(bool, "true when issuing a call took >= 90% of its measured time (launch overhead, not "
                              "kernels); null: not measured") = None
    cuda_graph: maybe(bool | str, "timing.cuda_graph: true when replays of a captured graph were timed, else "
                                  "'not applied: <why>'; absent when not asked for") = None
    flush_l2_bytes: maybe(int | str, "timing.flush_l2: bytes overwritten before every timed call, or 'not applied: "
                                     "<why>'; absent when not asked for") = None
    fresh_inputs_s: maybe(NonNeg, "timing.fresh_inputs: mean seconds to write new inputs before each call (warm-up "
                                  "and timed), kept out of the time; absent when not asked for") = None
    fresh_inputs_calls: maybe(int, "timing.fresh_inputs: how many times new inputs were written", ge=0) = None


class TimedCheck(Record, kw_only=True):
    """The output of the last timed call, read back after the timed loop and checked again (harness/engine/
    recheck.py): an output cached from earlier inputs, or deferred into the untimed check, fails it."""

    ok: maybe(bool, "whether the error is within the tolerance; null: not re-checked (`note` says why)")
    error: maybe(float, "the error, in the metric named by `metric`; null: not re-checked or infinite") = None
    tolerance: maybe(float, "the largest error allowed") = None
    metric: maybe(str, "the error metric (the case's check)") = None
    checked: maybe(str, "which elements were compared") = None
    inputs: maybe(str, "the inputs checked against: the case's, or timing.fresh_inputs' last (its seed)") = None
    note: maybe(str, "why it was not re-checked (the backend reads no output of a call, a check on another "
                     "case...)") = None


class Sync(Record, kw_only=True):
    """How the timer established that the device had finished the timed calls (harness/machine/sync.py)."""

    method: maybe(str, "cuda event, torch.Event, read-back of one element, jax.block_until_ready, or none needed "
                       "(synchronous host work); null: not timed, or no sync is proven on this device")
    reason: doc(str, "why that method is trusted (its source), or why the row has no time")


class Correctness(Record, kw_only=True):
    """The backend's output against the fp64 (or exact) reference, checked before anything was timed."""

    ok: doc(bool, "whether the error is within the tolerance")
    error: maybe(float, "the error, in the metric named by `metric`; null when infinite (no output to compare: "
                        "None, a wrong shape, NaN)")
    tolerance: doc(float, "the largest error accepted")
    metric: doc(str, "what `error` measures (e.g. max relative error; '#wrong elements' for collectives)")
    checked: doc(str, "what was compared (all elements, which rows or steps)")
    case_id: maybe(str, "the case that was checked where it is not the row's own: Triton's interpreter (a CPU run) "
                        "checks a large matmul or attention case at a small size and does not time it") = None


class Speedup(Record, kw_only=True):
    """This backend against the run's baseline: baseline time / this time (above 1: this backend is faster)."""

    baseline: doc(str, "the baseline backend")
    value: doc(float, "speedup at the medians", gt=0)
    ci95_low: doc(float, "lower end of its 95% CI (paired bootstrap over interleaved rounds)")
    ci95_high: doc(float, "upper end of its 95% CI")
    rounds: doc(int, "paired rounds the CI was computed from", ge=0)
    verdict: doc(Literal["faster", "slower", "equivalent", "inconclusive"],
                 "the CI against 1 +- equivalence_margin; inconclusive, with verdict_reason, where the case was "
                 "contended or fewer than min_rounds rounds were paired")
    variance_source: doc(str, "where the variance came from") = "interleaved rounds of one run"
    verdict_reason: maybe(str, "why no verdict was drawn: contended, or too few rounds: N < min_rounds") = None
    min_rounds: maybe(int, "the fewest paired rounds a verdict is drawn from (stats.MIN_ROUNDS); absent in rows "
                           "written before that rule, whose verdict reads the CI alone", ge=1) = None


class Repeats(Record, kw_only=True):
    """`repeats` > 1: the whole measurement was repeated; each repeat's median and their spread."""

    medians_s: doc(list[float], "median of each repeat, s")
    inner: doc(list[int], "calls per sample in each repeat")
    n: doc(int, "number of repeats", ge=2)
    spread_rel: doc(float, "(max - min) / median of the repeats' medians", ge=0)
    cv: doc(float, "coefficient of variation of the repeats' medians", ge=0)


class Variant(Record, kw_only=True):
    """A variant of the step timed beside it (a distributed step without its collectives, or the collectives
    alone), combined over ranks like the step."""

    time_s: maybe(TimeStats, "its time statistics; null when it could not run (see error)")
    per_rank_median_s: maybe(list[float], "every rank's median, s") = None
    error: maybe(str, "why it has no time") = None


class SteadyWindow(Record, kw_only=True):
    """One window of a sustained run."""

    index: doc(int, "window number from 0", ge=0)
    start_s: doc(float, "start of the window from the first sample, s", ge=0)
    median_s: doc(float, "median time per call in the window, s", ge=0)
    n: doc(int, "samples in the window", ge=0)
    tflops: maybe(float, "TFLOP/s at the window's median; null for a workload without FLOPs", ge=0)
    mean_sm_clock_mhz: maybe(float, "mean SM/GFX/core clock in the window, MHz; null: no readings")
    mean_power_w: maybe(float, "mean power in the window, W; null: no readings")


class SteadyState(Record, kw_only=True):
    """timing.sustain_s > 0: per-window throughput, when it settled, and the first window against the settled."""

    window_s: doc(float, "window length, s", gt=0)
    tolerance: doc(float, "windows within this relative change of the last count as steady", ge=0)
    windows: doc(list[SteadyWindow], "every window in order")
    reached_after_s: doc(float, "start of the first steady window, s", ge=0)
    reached: doc(bool, "whether a steady state was reached before the last window")
    first_window: doc(SteadyWindow, "the first window")
    steady_window: doc(SteadyWindow, "the first window of the steady state")
    first_vs_steady_time_change: doc(float, "first window's median / steady window's median - 1")


class Latency(Record, kw_only=True):
    """Per-event latency percentiles (inference: time to first token, time per output token), s."""

    p50: doc(float, "median, s", ge=0)
    p90: doc(float, "90th percentile, s", ge=0)
    p99: doc(float, "99th percentile, s (interpolated when n < 100)", ge=0)
    mean: doc(float, "mean, s", ge=0)
    n: doc(int, "number of events", ge=1)
    generations: maybe(float, "tpot_s only: the number of whole generations the samples cover", ge=0) = None


class ScalingBaseline(Record, kw_only=True):
    """The single-device step a distributed step's scaling efficiency is measured against."""

    case_id: doc(str, "its case")
    tflops: doc(float, "its TFLOP/s", ge=0)
    mfu: maybe(float, "its MFU", ge=0)
    median_s: doc(float, "its median step time, s", gt=0)
    same_per_device_batch: doc(bool, "true for weak scaling (each device keeps the single device's batch)")


class Routing(Record, kw_only=True):
    """A mixture-of-experts step's routing imbalance: in each MoE block, the tokens of the busiest expert over the
    mean tokens per expert (1 = perfectly balanced, E/k at most: every token's k choices on the same k experts).
    The busiest expert sets the block's grouped GEMM time, so this decides how far the realized figure is below a
    balanced step's."""

    per_step: doc(list[float], "each step the backend ran (warm-up and calibration calls included, in order): the "
                               "mean over MoE blocks of max/mean tokens per expert")
    mean: doc(float, "the mean of per_step", ge=1)
    worst_block: doc(float, "the largest max/mean of any one MoE block in any step", ge=1)
    experts: doc(int, "routed experts per MoE block", ge=1)
    top_k: doc(int, "experts each token uses", ge=1)
    expert_gemm: doc(str, "how the routed experts ran: one grouped GEMM (torch._grouped_mm, jax.lax.ragged_dot) "
                          "or a loop of one matmul per expert, with why")


class CommDetail(Record, kw_only=True):
    """How the communication figures of a distributed step were measured."""

    collectives: maybe(str, "which collectives the strategy issues per step") = None
    exposed_method: maybe(str, "how exposed communication time was measured") = None
    total_method: maybe(str, "how total communication time was measured") = None
    overlap_raw: maybe(float, "1 - exposed / total before clamping to [0, 1]") = None
    clamped: maybe(bool, "whether the overlap was clamped to [0, 1]") = None
    note: maybe(str, "why a figure is missing or clamped") = None
    textbook_bytes_per_rank: maybe(NonNeg, "JAX: bytes per rank the strategy's textbook schedule implies, for "
                                           "reference beside comm_bytes_per_rank (what XLA compiled)") = None
    textbook_formula: maybe(str, "the formula behind textbook_bytes_per_rank") = None


class Roofline(Record, kw_only=True):
    """Where the row stands on the roofline (harness/engine/roofline.py): its minimum traffic and intensity, the
    roof that bounds it, the speed-of-light time max(FLOPs / peak, bytes / bandwidth) and its share of it, and the
    floor under which a time is not physical (the row is then failed, `invalid: faster than the roofline`)."""

    bytes: doc(float, "the minimum DRAM traffic of the case's shape under its workload's byte model (operands read "
                      "once, results written once; STREAM's count for membw): the row's `bytes`", ge=0)
    intensity: maybe(NonNeg, "arithmetic intensity, FLOPs per byte; null where the workload states no traffic")
    peak_tflops: maybe(Positive, "the compute roof: the row's peak_tflops, TFLOP/s; null: none known")
    peak_membw_gbps: maybe(Positive, "the memory roof: the device's datasheet memory bandwidth (or override "
                                     "peak_membw_gbps), GB/s; null: none known (a CPU, a partition)")
    membw_entry: maybe(str, "the peak table entry the memory roof comes from, or override") = None
    membw_source: maybe(str, "where the memory roof comes from") = None
    ridge: maybe(NonNeg, "the ridge point: peak FLOP/s / bandwidth, FLOPs per byte; above it a row is compute-bound")
    bound: maybe(Literal["compute", "memory"], "the roof that bounds this shape (the larger of compute_s and "
                                               "memory_s); null where a roof it needs is unknown")
    compute_s: maybe(NonNeg, "FLOPs / compute roof, s; 0 without FLOPs; null without a compute roof")
    memory_s: maybe(NonNeg, "bytes / memory roof, s; 0 without traffic; null without a memory roof")
    sol_s: maybe(NonNeg, "the speed-of-light time max(compute_s, memory_s), s; null where a roof is unknown")
    sol_fraction: maybe(NonNeg, "sol_s / median time: the share of the speed of light reached (SOL-ExecBench's "
                                "bound; 1 on the roofline), the bandwidth share of a memory-bound row; null when not "
                                "timed")
    cache_bytes: maybe(int, "the device's last-level cache, bytes: traffic it may hold is left out of the floor",
                       ge=0) = None
    floor_s: maybe(NonNeg, "floor_share x max(floor FLOPs / compute roof, (bytes - cache_bytes) / bandwidth) over "
                           "the peak table's roofs (an override roof sets none), s: a median under it fails the row "
                           "as `invalid: faster than the roofline`; null: no such roof")
    floor_flops: maybe(NonNeg, "the fewest FLOPs any kernel needs for the case, where the row's convention credits "
                               "more (attention's fa2 count, a palm prefill or step: the causal count); null: the "
                               "row's flops") = None
    floor_share: maybe(Positive, "the share of the roofs' time the floor is (room for boost clocks above the "
                                 "peak's and a CPU estimate at its base clock)") = None
    off_roofline: maybe(str, "why the case is not placed on the roofline (a collective: its links bound it); null: "
                             "placed") = None
    note: maybe(str, "why a figure is null") = None


class PluginSource(Record, kw_only=True):
    """Where a plug-in backend's code came from (harness/engine/plugins.py); absent for a built-in backend."""

    object: doc(str, "the plug-in's import path, module:object")
    package: maybe(str, "the distribution that provides it; null where it was imported from a file not "
                        "installed as a package (see file)") = None
    version: maybe(str, "that distribution's version") = None
    entry_point: maybe(str, "the `xmfu.backends` entry point it was named by; null: named by import path") = None
    file: maybe(str, "no distribution: the module file it was imported from") = None
    module_version: maybe(str, "no distribution: the module's __version__, where it has one") = None
    loaded: maybe(bool, "false only in a validator's re-reading where the plug-in is not installed") = None


class Imported(Record, kw_only=True):
    """A row read from another tool's log by `xmfu import` (harness/results/importers): what the tool printed,
    and where xmfu's re-derivation of it disagrees beyond the printed precision."""

    tool: doc(str, "the tool whose log it was: nccl-tests, rccl-tests or mamf-finder")
    version: maybe(str, "the tool's version as its log states it; null where the log does not say")
    command: maybe(str, "the command line as the log states it; null where the log does not say")
    log: doc(str, "the original log, kept in the bundle as this attachment")
    line: doc(int, "the log's line the row was read from (1-based)", ge=1)
    printed: doc(dict[str, float | None], "the figures as the log printed them (nccl-tests: time_us, algbw_gbps, "
                                         "busbw_gbps, wrong; mamf-finder: mean, median, max TFLOP/s)")
    precision: doc(dict[str, float], "half a unit of the last printed digit of each printed figure")
    rederived: doc(dict[str, float | None], "the same figures under xmfu's conventions, from size, count, type and "
                                            "time (or m, n, k)")
    disagreements: doc(list[str], "each printed figure xmfu's re-derivation does not reproduce within the "
                                  "printed precision, and by how much; empty: every figure reproduced")


class PluginKey(Record, kw_only=True):
    """A plug-in's part of the comparability fields: a new release of the kernel is a new series."""

    object: doc(str, "the plug-in's import path, module:object")
    package: maybe(str, "its distribution, or null") = None
    version: maybe(str, "its distribution's version, or null") = None


class Comparability(Record, kw_only=True):
    """What must match for two rows to be compared; `comparability_key` is its hash."""

    workload: doc(Text, "the workload")
    params: doc(AnyMap, "the case's parameters")
    dtype: doc(str, "the data type")
    flop_convention: doc(str, "the FLOP count's convention")
    protocol: doc(AnyMap, "the timing settings that change what a number means (xmfu.timing/1: statistic, "
                          "cold_cache, sustained, flush_l2 and fresh_inputs when on, cuda_graph when this row's "
                          "calls were replayed from a graph)")
    plugin: maybe(PluginKey, "a plug-in backend's row: its object, distribution and version; absent for a "
                             "built-in backend") = None


class Clocks(OpenRecord, kw_only=True):
    """Whether the device's clocks were locked (NVML application clocks, amdsmi performance level, the CPU's
    cpufreq governor), as the telemetry source reads it."""

    locked: maybe(bool, "true locked, false not locked, null unknown (see reason)") = None
    reason: maybe(str, "why `locked` is null") = None
    source: maybe(str, "where it was read") = None
    detail: maybe(AnyMap, "what the source reported (governor, perf level, application clocks...)") = None


class Contention(OpenRecord, kw_only=True):
    """Other work on the host and on the timed GPU while the case ran."""

    contended: doc(bool, "other processes took enough CPU (or the GPU) to disturb the timing, or see warmup")
    reason: maybe(str, "why it counts as contended") = None
    warmup: maybe(str, "the row's timed samples against its own warm-up calls, where they lay further apart than a "
                       "quiet run's (results/rederive/warmup.py): then the row counts as contended") = None
    busiest_others: doc(list[AnyMap],
                        "the busiest other processes: pid, name, core_share") = field(default_factory=list)
    load_avg: doc(list[float],
                  "the host's load averages (1, 5, 15 min) at the end of the case") = field(default_factory=list)
    gpu_processes: maybe(list[AnyMap], "other compute processes on the GPU; null: not readable or no GPU") = None
    gpu_processes_attributed: maybe(bool, "false: this process is in its own PID namespace and the driver lists "
                                          "host PIDs, so gpu_processes may include xmfu's own and do not count "
                                          "as contention; null: no list") = None
    gpu_processes_note: maybe(str, "why gpu_processes are not attributed") = None
    pid_namespace: maybe(AnyMap, "this process's PID namespace: inode, initial (the host's), reason when "
                                 "unreadable; null off GPUs") = None
    window_s: doc(float, "length of the case, s", ge=0) = 0.0
    oversubscribed: maybe(bool, "whether xmfu's own threads waited for a core (more runnable threads than cores: "
                                "frameworks or tasks fighting, or other work); null where unreadable") = None
    run_queue: maybe(AnyMap, "xmfu's threads over the case: run_s, wait_s (ready but not running, "
                             "/proc/<pid>/task/<tid>/schedstat), wait_share (wait_s / window_s), threads, cores, "
                             "procs_running (/proc/stat at the end)") = None


class Threads(Record, kw_only=True):
    """How the host's threads were set for this row's framework on a CPU (harness/machine/threads.py)."""

    framework: maybe(str, "the backend's framework (torch, jax...)") = None
    intra_op_threads: maybe(int, "its intra-op threads: torch.get_num_threads(), or XLA's CPU pool size") = None
    intra_op_source: maybe(str, "where intra_op_threads comes from") = None
    omp_wait_policy: maybe(str, "OMP_WAIT_POLICY in force (PASSIVE: idle OpenMP threads sleep); null: the "
                                "runtime's default (libgomp spins, then sleeps)") = None
    omp_wait_policy_set_by: maybe(Literal["xmfu", "environment"], "who set OMP_WAIT_POLICY") = None
    omp_num_threads: maybe(str, "OMP_NUM_THREADS in force") = None
    set_by_xmfu: doc(list[str], "the variables xmfu set because they were unset") = field(default_factory=list)
    local_tasks: doc(int, "processes of this launch on this host", ge=1) = 1
    note: maybe(str, "why the recorded setting may not be in force") = None


class Telemetry(OpenRecord, kw_only=True):
    """Power, clocks, temperature and throttling over this backend's timed window, and the efficiency figures."""

    readings: doc(int, "readings in the window", ge=0) = 0
    window: maybe(str, "whose readings: this backend's samples, or the whole case when read at its ends") = None
    mean_power_w: maybe(NonNeg, "mean power, W (from the energy counter where there is one)") = None
    power_source: maybe(str, "energy counter or power readings") = None
    max_power_w: maybe(NonNeg, "highest power reading, W") = None
    mean_sm_clock_mhz: maybe(NonNeg, "mean SM/GFX/core clock, MHz") = None
    min_sm_clock_mhz: maybe(NonNeg, "lowest clock, MHz") = None
    max_temp_c: maybe(float, "highest temperature, C") = None
    throttle_fraction: maybe(dict[str, float], "per throttle reason, the fraction of readings it was active") = None
    throttle_readings: doc(int, "readings that reported throttle reasons", ge=0) = 0
    power_reading_sources: doc(list[str], "the sources power came from") = field(default_factory=list)
    power_limit_w: maybe(NonNeg, "the power limit, W") = None
    energy_per_iter_j: maybe(NonNeg, "mean power x median time, J per call") = None
    tflops_per_watt: maybe(NonNeg, "TFLOP/s per W") = None
    mfu_clock_adjusted: maybe(NonNeg, "MFU against the peak scaled to the observed clock") = None
    peak_clock_mhz: maybe(Positive, "the clock the datasheet peak assumes, MHz") = None
    unreadable: maybe(str, "fields the source could not read here, with why") = None
    unavailable: maybe(str, "why there is no telemetry at all") = None
