"""The bundle's other records: manifest.json, a line of samples.jsonl and of telemetry.jsonl, and the node record a
suite writes (`<suite>/<host>/node.json`). Declared once here, with row.py's Row; see types.py for why msgspec.
"""

from typing import Literal

from msgspec import field

from xmfu.harness.results.schema.parts import Clocks
from xmfu.harness.results.schema.types import AnyMap, NonNeg, OpenRecord, Record, RunId, doc, maybe

SCHEMA = "xmfu.bundle/2"
# Bundles this version reads: /1 differs only in the fields it could omit (they are optional in /2's records)
# and in stating fewer keys, so its rows are rows of this record; `xmfu validate` says which version it read.
ACCEPTED_SCHEMAS = ("xmfu.bundle/1", SCHEMA)
Attachment = doc(str, "a file of the bundle: a plain name", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class Counts(Record, kw_only=True):
    """Rows of cases.jsonl by status."""

    ok: doc(int, "rows checked and timed", ge=0)
    skipped: doc(int, "rows skipped, with their reason", ge=0)
    incorrect: doc(int, "rows that failed their correctness check", ge=0)
    failed: doc(int, "rows that failed (OOM, compile error...)", ge=0)


class Achievable(Record, kw_only=True):
    """The achievable peak that mfu_vs_achievable divides by: the mamf sweep's best row, or the config's."""

    tflops: doc(NonNeg, "TFLOP/s")
    source: doc(str, "the mamf sweep in this run, or config achievable_tflops")
    dtype: maybe(str, "the sweep's dtype") = None
    backend: maybe(str, "the backend of the best row") = None
    case_id: maybe(str, "the best row's case") = None
    params: maybe(AnyMap, "the best row's parameters") = None
    method: maybe(str, "flushed (the cache overwritten before every call, as mamf-finder), warm (back-to-back "
                       "calls) or not stated (config achievable_tflops without achievable_method)") = None


class Scale(Record, kw_only=True):
    """scale=smoke: the run was shrunk (harness/config/run_settings.py), and what was shrunk."""

    scale: doc(Literal["smoke"], "smoke sizes")
    notes: doc(dict[str, list[str]], "what was shrunk, in words, by phase (mamf, main)")


class Process(Record, kw_only=True):
    """The process that wrote the bundle (rank 0 of a distributed run)."""

    rank: doc(int, "global rank", ge=0)
    world_size: doc(int, "processes in the run", ge=1)
    local_rank: doc(int, "rank on this node", ge=0)
    launcher: doc(str, "torchrun, slurm, submitit_local, jax, env or single")
    nodes: maybe(int, "distinct hosts the run's processes ran on: 1 for a single process; in a multi-process "
                      "torch.distributed run, the hostnames its ranks exchanged (rows' notes.rank_map), counted by "
                      "rank 0 at the end; null where not measured (harness/results/bundle/nodes.py)", ge=1) = None


class Drift(OpenRecord, kw_only=True):
    """Clock, temperature and power at the run's first and last telemetry readings."""

    readings: maybe(int, "0 when there were no readings") = None
    seconds: maybe(float, "time between the first and last reading, s") = None
    sm_clock_mhz: maybe(list[float | None], "[first, last], MHz") = None
    temp_c: maybe(list[float | None], "[first, last], C") = None
    power_w: maybe(list[float | None], "[first, last], W") = None
    clock_change: maybe(float, "last / first clock - 1") = None


class Conditions(Record, kw_only=True):
    """The conditions of the whole run."""

    load_avg: doc(dict[str, list[float]], "the host's load averages at the run's start and end")
    busiest_others: doc(list[AnyMap], "the busiest other processes over the run: pid, name, core_share")
    contended_rows: doc(list[str], "rows (case and backend) measured under contention")
    drift: doc(Drift, "clock and temperature drift over the run")
    clocks: doc(Clocks, "whether clocks were locked")


class SuitePart(Record, kw_only=True):
    """The suite a run is one part of; `definition_sha` also joins every row's comparability key."""

    name: doc(str, "the suite (acceptance, nightly...)")
    version: doc(int, "the suite definition's version")
    definition_sha: doc(str, "hash of the suite's definition")
    suite_id: doc(str, "shared by every part of one suite run")
    part: doc(str, "this part's name")
    host: doc(str, "the node")


class Manifest(Record, kw_only=True):
    """manifest.json: what the run was, how it ended, and the counts every reader checks the rows against."""

    schema: doc(Literal[ACCEPTED_SCHEMAS], "the bundle format")
    run_id: RunId
    created: doc(str, "when the run started, UTC ISO 8601", min_length=1)
    status: doc(Literal["complete", "partial", "failed"], "complete; partial (interrupted: the finished rows "
                                                          "are kept); failed")
    xmfu_version: doc(str, "the xmfu that wrote it")
    git_sha: maybe(str, "the checkout's commit, when run from one")
    argv: doc(list[str], "the command line")
    overrides: doc(list[str], "the Hydra overrides")
    comparability_key: doc(str, "hash of the workload settings, dtype and timing protocol")
    counts: doc(Counts, "rows by status")
    finished: maybe(str, "when the run ended, UTC ISO 8601") = None
    workload: maybe(str, "the workload") = None
    dtype: maybe(str, "the data type") = None
    backends: maybe(list[str], "the backends run") = None
    achievable: maybe(Achievable, "the achievable peak of mfu_vs_achievable; null without one") = None
    suite: maybe(SuitePart, "the suite this run is a part of") = None
    scale: maybe(Scale, "scale=smoke: what was shrunk; absent at full scale") = None
    process: maybe(Process, "the process that wrote the bundle") = None
    tunableop: maybe(AnyMap, "rocm.tunableop: whether it applied and its settings; null when not asked for") = None
    conditions: maybe(Conditions, "load, contention and drift over the run") = None
    summary: maybe(dict[str, AnyMap], "per-workload run summaries (collectives: peak bus bandwidth per "
                                       "operation)") = None
    attachments: maybe(list[Attachment], "extra files covered by SHA256SUMS (profiler traces, TunableOp's "
                                         "results)") = None


class VariantSamples(Record, kw_only=True):
    """Raw samples of a variant timed beside the step."""

    samples: doc(list[float], "per-sample seconds (combined over ranks)")
    rank_samples: maybe(list[list[float]], "every rank's samples") = None
    repeats: maybe(list[int], "the repeat of each sample (its time_s is re-derived with them); absent in bundles "
                              "written before xmfu recorded it") = None


class Samples(Record, kw_only=True):
    """A line of samples.jsonl: the raw samples behind the row on the same line of cases.jsonl."""

    case_id: doc(str, "the row's case")
    backend: doc(str, "the row's backend")
    samples: doc(list[float], "seconds per call of every sample, in the order taken (each the mean of `inner` calls)")
    run_id: maybe(RunId, "the run") = None
    unit: maybe(Literal["s"], "the unit of samples: seconds") = None
    inner: maybe(int, "calls per sample", ge=1) = None
    warmup: doc(list[float], "seconds per warm-up call, not used in any figure") = field(default_factory=list)
    rounds: doc(list[int],
                "the interleaving round of each sample (pairs samples for speedups)") = field(default_factory=list)
    repeats: doc(list[int], "the repeat of each sample") = field(default_factory=list)
    rank_samples: maybe(list[list[float]], "distributed: every rank's samples") = None
    intervals: maybe(list[list[float]], "the perf_counter [start, end] of every sample, s (telemetry.jsonl's clock): "
                                        "the row's energy window; absent in rows written before it was "
                                        "recorded") = None
    variants: maybe(dict[str, VariantSamples], "the variants' raw samples") = None


class Reading(Record, kw_only=True):
    """A line of telemetry.jsonl: one reading of the device during a case."""

    case_id: doc(str, "the case it was read during")
    t: doc(float, "time.perf_counter() of the reading, s (the timers' clock)")
    power_w: maybe(float, "power, W") = None
    energy_j: maybe(float, "cumulative energy counter, J (only differences mean anything)") = None
    sm_clock_mhz: maybe(float, "SM (NVIDIA), GFX (AMD) or mean core (CPU) clock, MHz") = None
    mem_clock_mhz: maybe(float, "memory clock, MHz") = None
    temp_c: maybe(float, "temperature, C") = None
    throttle: maybe(list[str], "active throttle reasons; null: not readable") = None
    power_limit_w: maybe(float, "power limit, W") = None
    power_source: maybe(str, "which reading power came from") = None


class PartRecord(Record, kw_only=True):
    """One part of a suite on one node."""

    name: doc(str, "the part")
    kind: doc(str, "run (one device) or ranks (every process)")
    what: doc(str, "what it measures")
    exit_code: maybe(int, "its exit status; null: not run on this node")
    seconds: doc(float, "how long it took, s", ge=0)
    bundles: doc(list[str], "its bundles, relative to the suite's folder")
    note: doc(str, "why it did not run, or a caveat")


class NodeRecord(Record, kw_only=True):
    """`<suite>/<host>/node.json`: one node's part of a suite run."""

    host: doc(str, "the node")
    suite: doc(AnyMap, "name, version, definition_sha, suite_id")
    scale: doc(Literal["smoke", "full"], "the sizes the parts ran at")
    scale_reason: doc(str, "why that scale")
    platform: doc(AnyMap, "kind, reason and devices (index, name, uuid, pci_bus_id)")
    doctor: maybe(AnyMap, "xmfu doctor's facts and problems; null when not run on this node")
    parts: doc(list[PartRecord], "every part, in order")
    started: doc(str, "UTC ISO 8601")
    finished: doc(str, "UTC ISO 8601")


class ArchiveManifest(Record, kw_only=True):
    """`xmfu-archive.json` at the top of an archive made by `xmfu archive` (harness/results/bundle/archive.py)."""

    schema: doc(Literal["xmfu.archive/1"], "the archive format")
    created: doc(str, "when the archive was made, UTC ISO 8601")
    xmfu_version: doc(str, "the xmfu that made it")
    bundles: doc(list[str], "the bundles it holds: folders, relative to the archive's top")
    files: doc(dict[str, str], "every other file of the archive (relative path) and its SHA-256, hex")
