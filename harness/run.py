"""One `xmfu run`: detect the platform, expand the cases, run the phases, finalise the bundle."""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xmfu.harness import __version__
from xmfu.harness.engine import cost
from xmfu.harness.engine.case import RunAborted
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.interrupts import (
    hold_signals,
    interrupts_as_keyboard_interrupt,
    raise_if_interrupted,
    shielded,
    signal_received,
)
from xmfu.harness.engine.registry import Registry
from xmfu.harness.engine.runner import CaseRunner, Phase
from xmfu.harness.engine.settings import RunConfig
from xmfu.harness.machine import compat, contention, environment, stack, threads
from xmfu.harness.machine.frameworks import use_triton_interpreter
from xmfu.harness.machine.jax_distributed import JaxJoinFailed, jax_join_in_flight, jax_processes_joined
from xmfu.harness.machine.platform import DeviceInfo, Platform, detect
from xmfu.harness.machine.ranks import ProcessInfo, process_info
from xmfu.harness.machine.telemetry import close_sampler, open_sampler
from xmfu.harness.results.bundle import nodes
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.bundle.writer import BundleWriteError, BundleWriter, NullWriter, finite, utc_now
from xmfu.harness.results.render.progress import Progress
from xmfu.harness.results.render.table import table
from xmfu.harness.results.schema.comparability import comparability_key
from xmfu.harness.results.schema.row import Row

PROJECT_ROOT = Path(__file__).resolve().parent.parent
MAMF_WORKLOAD = "matmul"  # the achievable peak is by definition the best matmul (its `shapes` setting)
METHOD_WORDS = {"flushed": "cache flushed before every call, as mamf-finder's published table",
                "warm": "warm back-to-back calls (mamf.method=warm): above mamf-finder's published method"}


@dataclass
class Outcome:
    bundle: Path
    exit_code: int


def plan_phases(cfg: RunConfig, registry: Registry, device: DeviceInfo | None = None) -> list[Phase]:
    """The mamf sweep (when enabled) and then the main workload, fitted to `device` when given (e.g. its fp8
    format; None when only validating the config). Raises ConfigError on bad sizes."""
    phases = []
    if cfg.mamf.enabled:
        matmul = registry.workload(MAMF_WORKLOAD)
        sweep = {"name": MAMF_WORKLOAD, "shapes": [[m, n, k] for m in cfg.mamf.m for n in cfg.mamf.n
                                                   for k in cfg.mamf.k]}
        phases.append(Phase("mamf", matmul, matmul.cases(sweep, cfg.dtype, cfg.seed, device), [cfg.mamf.backend]))
    workload = registry.workload(cfg.workload_name)
    phases.append(Phase("main", workload, workload.cases(cfg.workload, cfg.dtype, cfg.seed, device), cfg.backends))
    return phases


def frameworks_used(cfg: RunConfig, registry: Registry) -> tuple[str, ...]:
    """The frameworks the run's backends compute with (the mamf sweep's included): detection asks those."""
    chosen = [(cfg.workload_name, b) for b in cfg.backends]
    if cfg.mamf.enabled:
        chosen.append((MAMF_WORKLOAD, cfg.mamf.backend))
    return registry.frameworks(chosen)


def new_run_id(cfg: RunConfig) -> str:
    if cfg.run_id:
        return cfg.run_id
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{cfg.workload_name}-{cfg.dtype}-{secrets.token_hex(3)}"


def run_key(cfg: RunConfig) -> str:
    """The manifest's comparability_key: the run's workload settings, dtype, protocol (its suite's tag included)
    and whether the mamf sweep ran. `xmfu validate` re-hashes it from config.yaml (harness/cli/formulas.py)."""
    return comparability_key({"workload": dict(cfg.workload), "dtype": cfg.dtype,
                              "protocol": cfg.protocol(), "mamf": cfg.mamf.enabled})


def _manifest(cfg: RunConfig, run_id: str, argv: Sequence[str], overrides: Sequence[str]) -> dict[str, Any]:
    key = run_key(cfg)
    out = {"run_id": run_id, "created": utc_now(), "xmfu_version": __version__,
           "git_sha": environment.git_sha(PROJECT_ROOT), "argv": list(argv), "overrides": list(overrides),
           "workload": cfg.workload_name, "dtype": cfg.dtype, "backends": list(cfg.backends),
           "comparability_key": key, "achievable": None}
    if cfg.suite is not None:
        out["suite"] = asdict(cfg.suite)
    if cfg.scale == "smoke":  # named only when shrunk: full-size bundles keep the manifest they always had
        out["scale"] = {"scale": cfg.scale, "notes": {phase: list(n) for phase, n in cfg.scale_notes.items()}}
    return out


def _say_scale(cfg: RunConfig) -> None:
    """scale=smoke: what was shrunk, in the run's output (the manifest and every row say it too)."""
    if cfg.scale != "smoke":
        return
    notes = list(dict.fromkeys(n for phase in cfg.scale_notes.values() for n in phase))  # each shrink once
    for note in notes or ["the workload's own sizes are already its smoke sizes"]:
        print(f"xmfu: scale=smoke: {note}", file=sys.stderr)


def _rounded(value: Any) -> Any:
    """4 significant digits for printing (the bundle keeps full precision)."""
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return float(f"{value:.4g}") if isinstance(value, float) else value


def _as_record(row: dict[str, Any]) -> Row:
    """A row the engine has just written, as its record. The engine keeps the row as it made it; the bundle has it
    with NaN and infinity as null (writer.finite), which is what the record takes."""
    return typed(finite(row))


def _summaries(phases: list[Phase], written: list[dict[str, Any]], rows: list[Row]) -> dict[str, Any]:
    """Per-workload run summaries (e.g. peak bus bandwidth), for workloads that define one. A workload's summary
    reads the rows as written (registry.WorkloadDef.summarize); `rows` are the same rows as records."""
    out = {}
    for phase in phases:
        if phase.workload.summarize and phase.name == "main":
            main = [w for w, r in zip(written, rows, strict=True) if r.phase == "main"]
            out[phase.workload.name] = phase.workload.summarize(main)
    return out


def tunableop_session(cfg: RunConfig, kind: str, frameworks: Sequence[str] = ("torch",)) -> dict[str, Any] | None:
    """`rocm.tunableop=true`: switch PyTorch TunableOp's tuning on before any GEMM runs. On anything but a
    ROCm device, or in a run without torch backends (`frameworks`), the setting is recorded as not applied."""
    if not cfg.rocm.tunableop:
        return None
    if kind != "rocm":
        return {"applied": False, "reason": f"rocm.tunableop applies to ROCm devices; this run is on {kind}"}
    if "torch" not in frameworks:
        return {"applied": False, "reason": "rocm.tunableop tunes torch's GEMMs; this run has no torch backend"}
    import torch

    scratch = Path(tempfile.mkdtemp(prefix="xmfu-tunableop-")) / "tunableop_results.csv"
    return {"applied": True, **stack.tunableop_start(torch, str(scratch), cfg.rocm.tunableop_max_tuning_ms)}


def _run_conditions(runner: CaseRunner, rows: list[Row], start: contention.Snapshot) -> dict[str, Any]:
    """Load, the busiest other processes over the whole run, contended cases, and clock/temperature drift."""
    end = contention.snapshot()
    flagged = [r.case_id + " " + r.backend for r in rows if r.contention is not None and r.contention.contended]
    return {"load_avg": {"start": start.load_avg, "end": end.load_avg},
            "busiest_others": contention.busiest(start, end, runner.own_pids),
            "contended_rows": flagged, "drift": runner.drift(), "clocks": runner.clocks}


def _finish(writer: Any, runner: CaseRunner, phases: list[Phase], status: str, proc: ProcessInfo,
            start: contention.Snapshot | None = None, wide: bool = False) -> list[Row]:
    """Finish the bundle and, where this process writes it, print the run's table; returns the run's rows as records."""
    rows = [_as_record(r) for r in runner.rows]
    if start is not None:
        writer.update(conditions=_run_conditions(runner, rows, start))
    if (writer.manifest.get("tunableop") or {}).get("applied"):
        import torch  # the tuned GEMM solutions, kept with the numbers they produced

        writer.attach("tunableop_results.csv", stack.tunableop_results(torch))
    if proc.world_size > 1:  # the hosts the ranks exchanged while preparing their cases (results/nodes.py)
        writer.update(process={**writer.manifest["process"], "nodes": nodes.of_run(proc.world_size, runner.rows)})
    summary = _summaries(phases, runner.rows, rows) if status == "complete" else {}
    if summary:
        writer.update(summary=summary)
    writer.finalize(status)
    if not proc.writes_bundle:
        return rows
    print(table(rows, wide=wide))
    if runner.ctx.config.scale == "smoke":
        print("scale=smoke: every row above ran at smoke sizes, not the full sizes (each row's scale_note says what "
              "was shrunk)")  # within the table's 120 columns
    for name, items in summary.items():
        for key, value in items.items():
            print(f"{name} summary {key}: {json.dumps(_rounded(value))}")
    a = runner.achievable
    if a and a.get("source", "").startswith("mamf"):
        print(f"maximum achievable {a['dtype']} matmul: {a['tflops']:.4g} TFLOP/s ({a['backend']}, {a['case_id']}; "
              f"{METHOD_WORDS.get(a['method'], a['method'])})")
    elif a:  # a denominator says how it was measured, wherever it is used
        print(f"vs achievable: divided by achievable_tflops={a['tflops']:g} TFLOP/s (from the config; "
              f"{METHOD_WORDS.get(a['method'], 'method ' + a['method'])})")
    print(f"bundle: {writer.folder}", flush=True)
    return rows


@contextmanager
def restored_environment() -> Iterator[None]:
    """Process-wide variables a run sets (JAX_PLATFORMS, XLA_PYTHON_CLIENT_PREALLOCATE, TRITON_INTERPRET...)
    are put back afterwards, so the next job of a Hydra multirun records its own environment, not ours."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        os.environ.update(saved)


class SetupError(ValueError):
    """The run cannot start where it was asked to write (one paragraph for the user, exit status 2)."""


def _open_bundle(folder: Path, manifest: dict[str, Any], config_yaml: str, env: dict[str, Any]) -> BundleWriter:
    try:
        return BundleWriter(folder, manifest, config_yaml, env, guard=shielded)
    except FileExistsError:
        raise SetupError(f"run_id: {folder} already exists (an earlier or concurrent run used run_id "
                         f"{folder.name!r}). Allowed: a run_id no run has used, or null for a fresh one") from None
    except OSError as exc:
        raise SetupError(f"results_dir: cannot create {folder} ({exc.strerror or exc}). Allowed: a folder this "
                         "user can write in") from None


def _write_failed(writer: Any, folder: Path, exc: BundleWriteError) -> Outcome:
    """The disk filled up (or the folder became unwritable): the bundle keeps its last whole row; try once to
    mark it partial, and say what happened in one paragraph."""
    closed = True
    try:
        writer.finalize("partial")
    except OSError:
        closed = False
    state = "status partial" if closed else "its manifest still says partial from the last whole row"
    print(f"xmfu: {exc.strerror or exc}. The run stopped; the bundle {folder} keeps every row written before "
          f"the failure ({state}); `xmfu validate {folder}` checks it.", file=sys.stderr)
    return Outcome(folder, 1)


def _chosen_device(plat: Platform, index: int | None) -> Platform:
    """The platform measuring `device_index` when the run names one (else its local rank's device)."""
    if index is None:
        return plat
    if index >= len(plat.devices):
        raise SetupError(f"device_index: {index} is out of range: this process sees {len(plat.devices)} "
                         f"{plat.kind} device(s). Allowed: null, or 0 to {len(plat.devices) - 1}")
    return plat.choose(index)


def _cost_here(cfg: RunConfig, phases: list[Phase], device: DeviceInfo) -> str | None:
    """On a CPU, what the run needs at least (engine/cost.py); what cannot fit in memory is refused, no bundle."""
    found = cost.run_cost(phases, device, cfg.dtype, cfg.timing.warmup_min_iters, cfg.cpu_clock_ghz)
    if found is None or not found.worth_naming:
        return None
    smaller = cost.shrink(cfg.workload_name, cfg.mamf.enabled)
    if found.cannot_fit:
        raise SetupError(f"{cost.refusal(found, cfg.dtype)}. {smaller}")
    return f"{cost.describe(found, cfg.dtype)}. {smaller}"


def _say_outside_range(findings: Sequence[str]) -> None:
    """Each installed version outside the supported range (environment.json's `compat` too); the run goes on."""
    for finding in findings:
        print(f"xmfu: {finding} (supported range: {compat.DOCS})", file=sys.stderr)


def execute(cfg: RunConfig, registry: Registry, config_yaml: str, argv: Sequence[str],
            overrides: Sequence[str]) -> Outcome:
    # Outside the restored environment: the variables stay for later jobs (OpenMP read them once) and the records.
    # The Python API and Hydra's submitit tasks reach a run here first (machine/threads.py).
    threads.prepare_environment()
    with restored_environment():
        return _execute(cfg, registry, config_yaml, argv, overrides)


def _execute(cfg: RunConfig, registry: Registry, config_yaml: str, argv: Sequence[str],
             overrides: Sequence[str]) -> Outcome:
    frameworks = frameworks_used(cfg, registry)
    # A multi-process JAX run joins its processes while detecting a GPU/TPU: within the workload's timeout_s.
    try:
        found = detect(cfg.device, frameworks, cfg.workload.get("timeout_s"))
    except JaxJoinFailed as exc:  # before any bundle: nothing to keep; JAX may abort the process any moment
        print(f"xmfu: {exc}. The run did not start (no bundle was written).", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    plat = _chosen_device(found, cfg.device_index)
    phases = plan_phases(cfg, registry, plat.device)  # after detection: cases may depend on the device
    said = _cost_here(cfg, phases, plat.device) if plat.kind == "cpu" else None  # refused before any bundle
    if plat.kind == "cpu":
        use_triton_interpreter()  # before any backend (or the torch profiler) imports triton
    ctx = RunContext(cfg, plat)
    proc = process_info()
    run_id = new_run_id(cfg)
    folder = Path(cfg.results_dir) / run_id
    manifest = {**_manifest(cfg, run_id, argv, overrides), "process": {**proc.as_dict(), "nodes": nodes.of_run(
                    proc.world_size, [])},  # 1 for a single process; a multi-process run's is counted at the end
                "tunableop": tunableop_session(cfg, plat.kind, frameworks)}
    sampler = open_sampler(plat) if cfg.telemetry.enabled else None
    if proc.writes_bundle:
        env = environment.capture(plat, cfg.cpu_clock_ghz, sampler, frameworks)
        writer: Any = _open_bundle(folder, manifest, config_yaml, env)
        print(f"xmfu: {plat.kind} ({plat.device.name}); writing {folder}", file=sys.stderr)
        _say_scale(cfg)
        _say_outside_range(env["compat"]["outside"])
        if said:
            print(f"xmfu: sizes meant for an accelerator: {said}", file=sys.stderr)
    else:
        writer = NullWriter(folder, manifest)
    progress = Progress(sum(len(p.cases) for p in phases), enabled=proc.writes_bundle)
    # the display reads records; a rank that writes no bundle shows nothing, so converts nothing
    shown = (lambda row: progress(_as_record(row))) if proc.writes_bundle else (lambda row: None)
    runner = CaseRunner(ctx, writer, run_id, shown, sampler, on_step=progress.step)
    _watch_ranks(runner, writer, proc, cfg.workload.get("timeout_s"))
    start = contention.snapshot()
    # The run's signal handlers cover the finishing too: after the phases (interrupted or not) signals are held, so
    # the last counts, the manifest and SHA256SUMS are written whole whatever arrives (interrupts.py).
    # A sampler that streams from a tool (neuron-monitor, xpu-smi) holds a subprocess: closed however the run ends.
    try:
        with interrupts_as_keyboard_interrupt():
            try:
                stopped = _measure(runner, phases)
            except BaseException:
                progress.close()  # the live line and its ticker end before the error is reported
                writer.finalize("partial")
                raise
            progress.close()
            if isinstance(stopped, BundleWriteError):
                return _write_failed(writer, folder, stopped)
            try:
                rows = _finish(writer, runner, phases, "complete" if stopped is None else "partial", proc, start,
                               cfg.output.wide)
            except BundleWriteError as exc:
                return _write_failed(writer, folder, exc)
            late = signal_received() is not None and not isinstance(stopped, KeyboardInterrupt)
    finally:
        close_sampler(sampler)
    code = None
    if isinstance(stopped, KeyboardInterrupt) or late:
        state = "complete" if stopped is None else "partial"
        print(f"xmfu: interrupted; finished cases are kept, bundle status {state}", file=sys.stderr)
        code = 130
    elif isinstance(stopped, RunAborted):
        print(f"xmfu: aborted ({stopped}); finished cases are kept, bundle status partial", file=sys.stderr)
        code = 1
    if code is not None:
        # A join still in flight: JAX aborts the process when its own join bound passes. A multi-process JAX run
        # that ended early: a process may be lost, and JAX's shutdown barrier at exit would wait for it and abort.
        if jax_join_in_flight() or jax_processes_joined() > 1:
            _leave(code)
        return Outcome(folder, code)
    ok = any(r.status == "ok" for r in rows)
    if not ok:  # exit status 1, said: each row's reason is in the notes under the table
        print(f"xmfu: no row is ok (rows {', '.join(sorted({r.status for r in rows})) or 'none'}): the notes under "
              "the table say why each was not; exit status 1", file=sys.stderr)
    return Outcome(folder, 0 if ok else 1)


def _leave(code: int) -> None:
    """End the process now, with `code`, without Python's shutdown (JAX's exit hook, whose barrier waits for
    every process, and whose end is an abort)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _watch_ranks(runner: CaseRunner, writer: Any, proc: ProcessInfo, timeout_s: Any) -> None:
    """A multi-process JAX run: a case that stalls for the workload's timeout_s (a process froze or died after
    joining; engine/stall.py) has its rows failed and the run ended here, bundle partial, exit status 1, before
    JAX's own bound (its heartbeat) ends the process by an abort. Called from the watching thread."""
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or proc.world_size < 2:
        return

    def stalled(reason: str) -> None:
        code = 1
        try:
            hold_signals()  # the bundle is finished whatever arrives now
            writer.finalize("partial")
            print(f"xmfu: aborted ({reason}); finished cases are kept, bundle status partial", file=sys.stderr)
        except BaseException as exc:  # the bundle could not be finished: said, and the run still ends
            print(f"xmfu: aborted ({reason}); the bundle could not be finished: {exc}", file=sys.stderr)
        finally:
            _leave(code)

    runner.stall_limit_s, runner.on_stall = float(timeout_s), stalled


def _measure(runner: CaseRunner, phases: list[Phase]) -> BaseException | None:
    """Run the phases; what stopped them (an interrupt, an aborted run, a bundle that cannot be written), or None.
    However they end, signals are held from then on (hold_signals): finishing must not be cut short."""
    try:
        raise_if_interrupted()  # a Ctrl-C at start-up whose KeyboardInterrupt was swallowed: no case runs
        for phase in phases:
            runner.run_phase(phase)
    except (KeyboardInterrupt, RunAborted, BundleWriteError) as exc:
        return exc
    finally:
        hold_signals()
    return None
