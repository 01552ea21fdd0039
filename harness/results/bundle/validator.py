"""`xmfu validate`: is a folder a complete, untouched xmfu bundle (`xmfu.bundle/2`, or `/1` of earlier
versions)? Every problem, by name.

Every command that reads bundles (compare, report, history add, export) loads them through `load_bundle`, which
validates as it reads, so nothing a bundle holds is trusted before it is checked:
- the files: regular files inside the folder, opened without following a link and never a device (a
  `telemetry.jsonl` linked to /dev/zero must not hang a reader), each read once, within a size limit;
- the checksums in SHA256SUMS;
- the records, against their typed declarations (schema/row.py, schema/records.py; the published JSON Schema
  schema/xmfu.bundle-2.schema.json is generated from them): every key declared, none other, types, ranges,
  statuses, a run id that is a plain folder name; strict JSON (no NaN or Infinity tokens);
- every figure that can be re-derived from what the bundle holds (rederive/: time statistics from the raw
  samples, rates from the time, speedups from the paired rounds, the peak from the peak table, FLOPs and bytes
  from the workload's formulas as the front door hands them in), which a consistent forgery would also have to
  get right; the manifest's counts by status, one samples record per row, finite samples.
Every load re-derives every figure: nothing is remembered from an earlier validation (a cache would have to be
trusted itself). What makes a year's report affordable (issue 30, item 14) is computing the same figures cheaper:
the rows' time statistics in one batch per bundle (stats.summarize_many, summarize's figures bit for bit), the
bootstrap band only where the run's own seeded CI is not reproduced (time statistics and speedups alike: a
speedup's 8,000-draw reference is drawn only for a CI its run's own draw does not give; the run's own draws of a
bundle's speedups counted, not sorted: statistics/paired_bounds.py `_drawn_medians`), and each device name
matched against the peak table once per process, each device and dtype of a bundle looked up once per bundle. What
is remembered across bundles is what their bytes determine alone, never a verdict (issue 42 item 5): config.yaml
parsed once per distinct text (libyaml where it reads as PyYAML's pure loader does, rederive/times.py), and a
config's settings parsed and expanded into the cases the run planned once per distinct settings, each planned
case's own figures (params, FLOPs, bytes) with them (the front door's formulas, harness/cli/formulas.py: run_id and
results_dir, which differ from bundle to bundle, are checked for each); every row of every bundle is still checked
against them.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from xmfu.harness.results import schema
from xmfu.harness.results.bundle import files, nodes
from xmfu.harness.results.bundle.reader import Bundle
from xmfu.harness.results.bundle.records import jsonl, record
from xmfu.harness.results.rederive import energy as rederive_energy
from xmfu.harness.results.rederive import formats as rederive_formats
from xmfu.harness.results.rederive import roofline as rederive_roofline
from xmfu.harness.results.rederive import row_checks, times
from xmfu.harness.results.rederive import run as rederive_run
from xmfu.harness.results.rederive import series as rederive_series
from xmfu.harness.results.rederive import warmup as rederive_warmup
from xmfu.harness.results.rederive.imported import import_config
from xmfu.harness.results.rederive.imported import problems as imported_problems

MAX_FILE_BYTES = files.MAX_FILE_BYTES  # a bundle file larger than this is refused (bundle/files.py reads them)
REL_TOL = times.REL_TOL


@dataclass
class Loaded:
    bundle: Bundle | None
    problems: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)  # figures that could not be re-derived, and why


# The workloads' formulas (FLOPs, bytes, params), which this layer may not import: the front door installs them
# (harness/cli/formulas.py) so that every command that loads a bundle checks them; None: not checked, and said.
_FORMULAS: list[times.Formulas | None] = [None]
_RUN_FORMULA: list[times.RunFormula | None] = [None]


def use_formulas(formulas: times.Formulas | None, run_formula: times.RunFormula | None = None) -> None:
    """Install the formulas `load_bundle` re-derives FLOPs, bytes and params with, and the run's, which gives the
    manifest's comparability_key (the front door calls this)."""
    _FORMULAS[0], _RUN_FORMULA[0] = formulas, run_formula


_Reject = files.Rejected
_read = files.read


def _sums(folder: Path, data: dict[str, bytes], defined: tuple[str, ...] = (),
          streamed: dict[str, str | None] | None = None) -> list[str]:
    """Every line of SHA256SUMS checked; every file the format defines as present (`defined`: the required
    files, telemetry.jsonl in /2, the manifest's attachments) present and listed. `streamed`: the digests of files
    hashed as they were streamed (None: the file could not be read, a problem already named)."""
    streamed = streamed or {}
    problems, listed = [], {}
    for line in data[schema.SUMS].decode(errors="replace").splitlines():
        digest, _, name = line.partition("  ")
        name = name.strip()
        if not name or Path(name).name != name or name.startswith("."):
            problems.append(f"{schema.SUMS} names {name!r}, which is not a plain file name in the bundle")
            continue
        listed[name] = digest
    problems += [f"{schema.SUMS} does not list {name}" for name in dict.fromkeys((*schema.REQUIRED_FILES, *defined))
                 if name not in listed]
    for name, digest in listed.items():
        if name in streamed:
            if streamed[name] is not None and streamed[name] != digest:
                problems.append(f"{name}: checksum mismatch (file changed or truncated after the run wrote it)")
            continue
        if name not in data:
            try:
                data[name] = _read(folder, name)
            except _Reject as exc:
                problems.append(str(exc))
                continue
        if hashlib.sha256(data[name]).hexdigest() != digest:
            problems.append(f"{name}: checksum mismatch (file changed or truncated after the run wrote it)")
    return problems


def _reading_problems(line: bytes, where: str, kept: rederive_energy.Kept | None = None,
                      fields: dict[str, str] | None = None) -> list[str]:
    """A telemetry.jsonl line's problems (bundle/files.py `stream` hands each line here as it reads); the time and
    value a measured row's energy needs kept in `kept` (rederive/energy.py)."""
    try:
        value, problems = record("reading", line, where)
    except _Reject as exc:
        return [str(exc)]
    if kept is not None and fields and not problems:
        rederive_energy.keep(kept, fields, value)
    return problems


def _consistency(manifest: dict, rows: list[dict], samples: list[dict], seconds: bool) -> list[str]:
    """The manifest's counts, run ids and line pairing against the records; `seconds`: every sample is a finite,
    non-negative number (`_all_seconds`), else `_sample_problems` names the records that are not."""
    problems = []
    counts = dict.fromkeys(schema.ROW_STATUSES, 0)
    for number, row in enumerate(rows, 1):
        if row.get("status") in counts:
            counts[row["status"]] += 1
        if row.get("run_id") != manifest.get("run_id"):
            problems.append(f"{schema.CASES} line {number}: run_id {row.get('run_id')!r} is not the manifest's")
    if isinstance(manifest.get("counts"), dict) and manifest["counts"] != counts:
        problems.append(f"{schema.MANIFEST}: counts {manifest['counts']} do not match {schema.CASES} {counts}")
    if len(samples) != len(rows):
        problems.append(f"{schema.SAMPLES} has {len(samples)} records for {len(rows)} rows in {schema.CASES}")
    for number, (row, rec) in enumerate(zip(rows, samples, strict=False), 1):
        if (rec.get("case_id"), rec.get("backend")) != (row.get("case_id"), row.get("backend")):
            problems.append(f"{schema.SAMPLES} line {number} is not the samples of {schema.CASES} line {number}")
    return problems + ([] if seconds else _sample_problems(samples))


def _all_seconds(samples: list[dict]) -> bool:
    """Every record's samples finite, non-negative numbers, read in one conversion (a bundle's every sample):
    where not, `_sample_problems` names the records."""
    lists = [rec.get("samples") if isinstance(rec, dict) else None for rec in samples]
    if not all(type(x) is list for x in lists):
        return False
    try:
        x = np.fromiter(chain.from_iterable(lists), dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return False
    return bool(np.isfinite(x).all()) and not bool((x < 0).any())


def _sample_problems(samples: list[dict]) -> list[str]:
    problems = []
    for number, rec in enumerate(samples, 1):
        values = rec.get("samples") if isinstance(rec, dict) else None
        if isinstance(values, list) and values:
            try:
                x = np.asarray(values, dtype=np.float64)
            except OverflowError:  # an integer past any float
                problems.append(f"{schema.SAMPLES} line {number}: samples must be finite, non-negative seconds")
                continue
            except (TypeError, ValueError):
                problems.append(f"{schema.SAMPLES} line {number}: samples are not all numbers")
                continue
            if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x < 0):
                problems.append(f"{schema.SAMPLES} line {number}: samples must be finite, non-negative seconds")
    return problems


def _environment(raw: bytes) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """environment.json's devices, and its installed `packages` (None where it records none)."""
    try:
        env = json.loads(raw)
    except ValueError:
        return [], None
    env = env if isinstance(env, dict) else {}
    devices, packages = env.get("devices"), env.get("packages")
    return ([d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else [],
            packages if isinstance(packages, dict) else None)


def _membw_override(config: str) -> float | None:
    """config.yaml's peak_membw_gbps (the run's memory roof when given), or None."""
    try:
        data = times.parsed_config(config)
    except Exception:  # a config.yaml that does not parse: the settings' own check says so
        return None
    value = data.get("peak_membw_gbps") if isinstance(data, dict) else None
    return float(value) if times.is_number(value) else None


def _rederived(manifest: dict, rows: list[dict], samples: list[dict], data: dict[str, bytes],
               formulas: times.Formulas | None, run_formula: times.RunFormula | None,
               typed_samples: bool = False, seconds: bool = False) -> tuple[list[str], list[str]]:
    """(problems, unchecked): every figure re-derived from the bundle's own contents (rederive/); `typed_samples`:
    every samples.jsonl line fit its typed declaration (its numbers are floats); `seconds`: and every sample is a
    finite, non-negative float (the per-row checks then need not look again)."""
    config = data[schema.CONFIG].decode(errors="replace")
    settings, (devices, packages) = times.settings_of(config), _environment(data[schema.ENVIRONMENT])
    problems = row_checks.time_field_problems(manifest, ("created", "finished"), schema.MANIFEST)
    problems += row_checks.duplicate_problems(rows, schema.CASES)
    suite = rederive_run.suite_key(manifest)
    truths = times.time_truths(rows, samples, settings, seconds)  # every row's statistics at once, the same figures
    warm = rederive_warmup.warmup_figures(samples, typed_samples)  # and every row's warm-up comparison
    peaks: dict[Any, Any] = {}  # this bundle's peak lookups, by device and dtype (its devices and settings fixed)
    membw_override = _membw_override(config)
    for number, row in enumerate(rows, 1):
        where = f"{schema.CASES} line {number}"
        if number <= len(samples):
            rec = samples[number - 1]
            problems += times.time_problems(row, rec, settings, where, truths[number - 1], warm[number - 1], seconds)
            problems += rederive_series.variant_problems(row, rec, settings, where)
            problems += rederive_series.steady_problems(row, rec, settings, where)
        problems += row_checks.derived_problems(row, where)
        problems += row_checks.status_problems(row, where)
        problems += row_checks.peak_problems(row, devices, settings, where, peaks)
        problems += rederive_formats.format_problems(row, devices, settings, where, peaks)
        problems += row_checks.version_problems(row, packages, where)
        problems += rederive_roofline.roofline_problems(row, samples[number - 1] if number <= len(samples) else None,
                                                        devices, membw_override, where, peaks)
        problems += row_checks.time_field_problems(row, ("started", "finished"), where)
        problems += row_checks.key_problems(row, where, manifest.get("schema") == schema.SCHEMA)
        problems += rederive_run.suite_problems(row, suite, where)
    problems += row_checks.speedup_problems(rows, samples, settings, schema.CASES, seconds)
    problems += nodes.problems(manifest, rows, schema.MANIFEST)
    imported = import_config(config)
    if imported is not None:  # another tool's log (`xmfu import`): every row re-built from the log it keeps
        return problems + imported_problems(imported, data, manifest, rows, samples, schema.CASES), []
    unchecked = []
    # a /1 manifest's key hashed its day's protocol (as its rows' keys)
    current = manifest.get("schema") == schema.SCHEMA
    if current and run_formula is not None:
        restated = run_formula(config, manifest)
        problems += rederive_run.manifest_problems(manifest, restated, schema.MANIFEST)
        if restated.unchecked:
            unchecked.append(f"{schema.MANIFEST}: {restated.unchecked}")
    elif current and formulas is not None:
        unchecked.append(f"{schema.MANIFEST}: comparability_key: no run formula was handed to the validator")
    if formulas is None:
        return problems, [*unchecked, "params, FLOPs and bytes: no workload formulas were handed to the validator"]
    for number, (row, restated) in enumerate(zip(rows, formulas(config, devices, rows, samples), strict=True), 1):
        problems += row_checks.restated_problems(row, restated, f"{schema.CASES} line {number}")
        problems += rederive_roofline.roofline_work_problems(row, restated.figures.get(rederive_roofline.ROOFLINE_WORK),
                                                             f"{schema.CASES} line {number}")
        if restated.unchecked:
            unchecked.append(f"{schema.CASES} line {number}: {restated.unchecked}")
    return problems, unchecked


def load_bundle(folder: str | Path, formulas: times.Formulas | None = None,
                run_formula: times.RunFormula | None = None, held: bool = False) -> Loaded:
    """Read and validate the bundle at `folder`; `bundle` is None where it cannot be read at all. `formulas`,
    `run_formula`: the workloads' and the run's (None: those the front door installed with `use_formulas`).
    `held`: the caller keeps what it loads to its end (see `cycles_uncollected`)."""
    with cycles_uncollected(freeze=held):
        return _load(Path(folder), formulas, run_formula)


@contextmanager
def cycles_uncollected(freeze: bool = False) -> Iterator[None]:
    """Python's cyclic garbage collector paused while a bundle is decoded and re-derived. Decoding allocates a few
    containers per value (no cycles: freed by reference counting), and every 700 allocations start a collection
    that, each time an older generation's turn comes, walks every object alive, the bundle read so far included:
    a quarter of a 4,000-row bundle's load (2.03 against 1.54 s CPU, this project's machine, 3 December 2026;
    benchmarks/validation_cost.py). The collector resumes where it was on before, whatever the load raised.

    `freeze`: for a caller that holds what it loads to its end (compare, report, validate), what the load made goes
    straight to the collector's permanent generation, never walked: not by the first collection after the load (a
    sweep of everything it left young) nor by those the caller's own work starts (together a third of `xmfu
    compare`'s CPU on two such bundles). Reference counting still frees what the caller lets go. Not for a caller
    that streams bundles one at a time (history add, export): what it made of the last bundle and would have
    collected (cycles, a table's) would be frozen with the next one. Without `freeze`, for any stretch of work that
    makes many containers and no cycles: `xmfu compare` pauses it while it compares what it loaded and makes its text.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if was_on:
            gc.enable()


def _load(folder: Path, formulas: times.Formulas | None, run_formula: times.RunFormula | None) -> Loaded:
    formulas, run_formula = formulas or _FORMULAS[0], run_formula or _RUN_FORMULA[0]
    if not folder.is_dir():
        return Loaded(None, [f"{folder}: not a folder"])
    data: dict[str, bytes] = {}
    problems: list[str] = []
    for name in (*schema.REQUIRED_FILES, schema.SUMS):
        try:
            data[name] = _read(folder, name)
        except _Reject as exc:
            problems.append(str(exc))
    if problems:
        return Loaded(None, problems)
    kept: rederive_energy.Kept = {}  # telemetry of the cases whose rows measured energy
    try:
        manifest, found = record("manifest", data[schema.MANIFEST], schema.MANIFEST)
    except _Reject as exc:
        streamed, streamed_problems = _telemetry(folder, kept, {})
        return Loaded(None, [*streamed_problems, *_sums(folder, data, (), streamed), str(exc)])
    version = manifest.get("schema") if isinstance(manifest, dict) else None
    read = version in schema.ACCEPTED_SCHEMAS  # the records of a format this xmfu reads, decoded
    rows, row_problems, typed_rows = jsonl(schema.CASES, data[schema.CASES], "row") if read else ([], [], None)
    samples, sample_problems, typed_samples = jsonl(schema.SAMPLES, data[schema.SAMPLES], "samples") if read \
        else ([], [], None)
    streamed, streamed_problems = _telemetry(folder, kept, rederive_energy.wanted(rows))
    problems += streamed_problems + _sums(folder, data, _defined(manifest), streamed)
    if not read:
        return Loaded(None, [*problems, f"{schema.MANIFEST}: schema {version!r} is not a bundle format this xmfu "
                                        f"reads ({', '.join(schema.ACCEPTED_SCHEMAS)}); a newer xmfu wrote it, or it "
                                        "is no bundle"])
    problems += found + row_problems + sample_problems
    unchecked: list[str] = []
    if isinstance(manifest, dict):
        # every sample a finite, non-negative float: typed as floats, and checked in one conversion
        seconds = typed_samples is not None and _all_seconds(samples)
        problems += _consistency(manifest, rows, samples, seconds)
        more, unchecked = _rederived(manifest, rows, samples, data, formulas, run_formula, typed_samples is not None,
                                     seconds)
        problems += more + _energy(rows, samples, kept)
    bundle = Bundle(folder, manifest, rows, samples, typed_rows) if isinstance(manifest, dict) else None
    return Loaded(bundle, problems, unchecked)


def _telemetry(folder: Path, kept: rederive_energy.Kept,
               fields: dict[str, str]) -> tuple[dict[str, str | None], list[str]]:
    """telemetry.jsonl checked a line at a time as it is read (a long run's telemetry costs time, not memory), the
    readings of the cases in `fields` kept: (its digest for SHA256SUMS, None where it could not be read; its
    problems). Nothing where the bundle has no telemetry.jsonl (SHA256SUMS says whether it should)."""
    if not ((folder / schema.TELEMETRY).exists() or (folder / schema.TELEMETRY).is_symlink()):
        return {}, []
    try:
        readings = files.stream(folder, schema.TELEMETRY,
                                lambda line, where: _reading_problems(line, where, kept, fields))
    except _Reject as exc:
        return {schema.TELEMETRY: None}, [str(exc)]
    return {schema.TELEMETRY: readings.digest}, readings.problems


def _energy(rows: list[Any], samples: list[Any], kept: rederive_energy.Kept) -> list[str]:
    """Every row's energy figures against telemetry.jsonl and its samples.jsonl line (the same line number)."""
    return [p for number, (row, rec) in enumerate(zip(rows, samples, strict=False), 1) if isinstance(row, dict)
            for p in rederive_energy.energy_problems(row, rec if isinstance(rec, dict) else None, kept,
                                                     f"{schema.CASES} line {number}")]


def _defined(manifest: Any) -> tuple[str, ...]:
    """Files the format defines as present beyond the required ones: telemetry.jsonl (the /2 writer always writes
    and lists it, readings or none) and the attachments the manifest names."""
    if not isinstance(manifest, dict):
        return ()
    attachments = manifest.get("attachments") if isinstance(manifest.get("attachments"), list) else []
    telemetry = (schema.TELEMETRY,) if manifest.get("schema") == schema.SCHEMA else ()
    return (*telemetry, *(a for a in attachments if isinstance(a, str)))


def validate_bundle(folder: str | Path) -> list[str]:
    """Every problem found in the bundle at `folder`; an empty list means it is valid."""
    return load_bundle(folder).problems
