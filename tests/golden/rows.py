"""Bundles the engine writes for given samples, kept in tests/golden/rows/ and compared byte for byte: the runner's
row assembly (CaseRunner._row and what it calls) may be reorganised, never changed by accident (issue 37).

Every input that is not the samples is fixed: the clock (a seeded scripted perf_counter, so every timer measures
the same times), the wall clock (utc_now), the device, host contention and threads (a backend's peak memory is
scripted). The real
workload specs (matmul, attention, transformer, collectives, inference) expand the cases, so their FLOPs, bytes and
own figures are in the rows; the backends are scripted here: one per status and timing path (ok and timed, ok and
not timed, incorrect, failed, skipped, with variants, ranks and attachments).

`python -m tests.golden.rows` writes the expected bundles anew; run it only where rows are meant to change, and say
why in the commit.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

EXPECTED = Path(__file__).resolve().parent / "rows"
FILES = ("cases.jsonl", "samples.jsonl", "telemetry.jsonl", "manifest.json")
TIMING = {"warmup_s": 0.0, "warmup_min_iters": 2, "min_samples": 5, "max_samples": 9, "round_samples": 3,
          "target_rel_ci": 0.02, "max_time_s": 1e6, "bootstrap_resamples": 200, "min_sample_s": 0.0005}


class ScriptedClock:
    """perf_counter for the engine: every call advances by a step drawn from a seeded generator, so a timer
    measures the same (noisy, positive) times on every machine."""

    def __init__(self, seed: int) -> None:
        self.rng, self.now = np.random.default_rng(seed), 1000.0

    def __call__(self) -> float:
        self.now += float(self.rng.uniform(1e-4, 3e-4))
        return self.now


class Stamps:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"2026-12-01T00:00:{self.n % 60:02d}.{self.n:06d}Z"


@dataclass
class GoldenCase:
    """A real workload case whose check is scripted: `check` passes for every backend but `wrong`."""

    inner: Any

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def case_id(self) -> str:
        return self.inner.case_id

    def check_rows(self) -> Any:
        return None

    def check(self, result: Any) -> Any:
        from xmfu.harness.engine.case import Check

        metric = "#wrong elements" if self.inner.workload == "collectives" else "max rel error"
        error = 0.0 if result == "right" else 3.0
        return Check(error <= 1e-3, error, 1e-3, metric, "all (scripted)")


def _prepared(kind: str, framework: str = "host", ranks: int | None = None, variants: bool = False) -> Any:
    from xmfu.harness.engine.case import Prepared

    notes: dict[str, Any] = {"library": f"golden {kind}"}
    gather = None
    if ranks:
        notes["ranks"] = ranks

        def gather(samples: list[float]) -> list[list[float]]:
            return [list(samples), [s * 1.1 for s in samples]][:ranks]
    p = Prepared(lambda: None, lambda rows: "wrong" if kind == "wrong" else "right", framework,
                 notes=notes, gather=gather, peak_memory=lambda: 123_456_789,
                 peak_memory_source="scripted allocator peak",
                 output=(lambda returned, rows: "right") if kind == "base" else None)  # its timed output re-checked
    if kind == "interpreted":
        p.timing_valid, p.timing_note = False, "scripted interpreter: checked, not timed"
    if variants:
        p.variants = {"no_comm": lambda: None, "comm_alone": lambda: None}
    if kind == "attach":
        p.attachments = {"trace.json": '{"traceEvents": []}'}
    return p


def _implementations(ranks: int | None = None, variants: bool = False) -> dict[str, Any]:
    from xmfu.harness.engine.case import Unavailable
    from xmfu.harness.engine.registry import Implementation

    def available(case, ctx):
        return True, ""

    def absent(case, ctx):
        return False, "scripted: not installed here"

    def crash(case, ctx):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (scripted)")

    def refuse(case, ctx):
        raise Unavailable("scripted: refuses this shape")

    return {
        "base": Implementation("base", available, lambda c, x: _prepared("base", ranks=ranks, variants=variants)),
        "fast": Implementation("fast", available, lambda c, x: _prepared("fast", ranks=ranks, variants=variants)),
        "attach": Implementation("attach", available, lambda c, x: _prepared("attach")),
        "interpreted": Implementation("interpreted", available, lambda c, x: _prepared("interpreted")),
        "wrong": Implementation("wrong", available, lambda c, x: _prepared("wrong")),
        "crash": Implementation("crash", available, crash),
        "refuse": Implementation("refuse", available, refuse),
        "absent": Implementation("absent", absent, crash),
    }


BACKENDS = ["base", "fast", "attach", "interpreted", "wrong", "crash", "refuse", "absent"]
# name -> (workload, overrides, device kind, ranks, variants)
SCENARIOS: dict[str, tuple[str, list[str], str, int | None, bool]] = {
    "matmul-gpu": ("matmul", ["scale=smoke", "dtype=bf16", "baseline=base"], "cuda", None, False),
    "matmul-cpu-repeats": ("matmul", ["scale=smoke", "dtype=fp32", "repeats=2", "baseline=base"], "cpu", None, False),
    "attention-gpu": ("attention", ["scale=smoke", "dtype=bf16"], "cuda", None, False),
    "transformer-gpu": ("transformer", ["scale=smoke", "dtype=bf16"], "cuda", None, True),
    "transformer-sustained": ("transformer", ["scale=smoke", "dtype=fp32", "timing.sustain_s=0.01",
                                              "timing.window_s=0.002"], "cpu", None, False),
    "collectives-gpu": ("collectives", ["scale=smoke", "dtype=fp32"], "cuda", 2, False),
    "inference-gpu": ("inference", ["scale=smoke", "dtype=bf16"], "cuda", None, False),
}


def _device(kind: str) -> Any:
    from xmfu.harness.machine.platform import DeviceInfo

    if kind == "cuda":
        return DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", vendor="nvidia", memory_bytes=85_520_809_984,
                          multiprocessors=132, compute_capability="9.0", cache_bytes=52_428_800,
                          uuid="00000000-0000-0000-0000-000000000001", pci_bus_id="0000:18:00.0",
                          torch_device_type="cuda")
    cpu = {"clock_ghz": 2.596096, "clock_source": "scripted", "flags": ["avx2", "avx512f", "avx512_bf16", "fma"],
           "physical_cores": 2, "logical_cpus": 2, "sockets": 1, "model": "AMD EPYC 9R14 (scripted)"}
    return DeviceInfo(kind="cpu", name="AMD EPYC 9R14 (scripted)", vendor="AuthenticAMD", memory_bytes=24 * 2**30,
                      multiprocessors=2, arch="x86_64", cache_bytes=33_554_432, cpu=cpu)


@contextmanager
def fixed_world(seed: int) -> Iterator[None]:
    """Everything the rows read that is not the samples, fixed."""
    import time

    from xmfu.harness.machine import contention

    clock, stamps = ScriptedClock(seed), Stamps()
    quiet = {"contended": False, "busiest_others": [], "load_avg": [0.5, 0.4, 0.3], "window_s": 0.25}
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(time, "perf_counter", clock))
        for target in ("xmfu.harness.engine.runner.utc_now", "xmfu.harness.engine.row_sections.utc_now",
                   "xmfu.harness.results.bundle.writer.utc_now"):
            stack.enter_context(mock.patch(target, stamps))
        stack.enter_context(mock.patch.object(contention, "snapshot", lambda *a, **k: None))
        stack.enter_context(mock.patch.object(contention, "own_processes", lambda *a, **k: set()))
        stack.enter_context(mock.patch.object(contention, "assess", lambda *a, **k: dict(quiet)))
        stack.enter_context(mock.patch("xmfu.harness.engine.row_sections.threads_record",
                                       lambda framework: {"framework": framework, "intra_op_threads": 2,
                                                                        "intra_op_source": "scripted"}))
        # the frameworks this process happens to have imported, and their installed versions: scripted
        stack.enter_context(mock.patch("xmfu.harness.machine.stack.loaded_versions", lambda: {"torch": "2.13.0"}))
        # the cache flush of the mamf sweep: a buffer of the device's last-level cache size, not allocated here
        stack.enter_context(mock.patch("xmfu.harness.engine.runner.flush_buffer",
                                       lambda size, device=None: (lambda: None, size)))
        yield


def write_scenario(name: str, folder: Path) -> Path:
    from tests.golden.config import run_config_for
    from xmfu.harness.engine.context import RunContext
    from xmfu.harness.engine.registry import WorkloadDef
    from xmfu.harness.engine.runner import CaseRunner, Phase
    from xmfu.harness.machine.platform import Platform
    from xmfu.harness.results.bundle.writer import BundleWriter
    from xmfu.workloads.catalog import build_registry

    workload, overrides, kind, ranks, variants = SCENARIOS[name]
    real = build_registry().workload(workload)
    cfg = run_config_for(workload, overrides, BACKENDS)
    device = _device(kind)
    golden = WorkloadDef(workload, real.expand, _implementations(ranks, variants), summarize=real.summarize,
                         for_device=real.for_device, derive=real.derive, settings=real.settings)
    cases = [GoldenCase(c) for c in golden.cases(cfg.workload, cfg.dtype, cfg.seed, device)]
    with fixed_world(seed=sum(map(ord, name))):
        ctx = RunContext(cfg, Platform(kind, (device,), "scripted"))
        manifest = {"run_id": name, "created": "2026-12-01T00:00:00Z", "xmfu_version": "golden", "git_sha": None,
                    "argv": overrides, "overrides": overrides, "comparability_key": "golden"}
        writer = BundleWriter(folder / name, manifest, "", {})
        runner = CaseRunner(ctx, writer, name, lambda row: None)
        phases = [Phase("main", golden, cases, cfg.backends)]
        if workload == "matmul":
            phases.insert(0, Phase("mamf", golden, cases[:1], ["base", "fast"]))
        for phase in phases:
            runner.run_phase(phase)
        writer.finalize("complete")
    return folder / name


def contents(bundle: Path) -> dict[str, str]:
    out = {}
    for f in FILES:
        text = (bundle / f).read_text() if (bundle / f).exists() else ""
        if f == "manifest.json":
            data = json.loads(text)
            data.pop("finished", None)
            text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        out[f] = text
    return out


def main() -> int:
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            bundle = write_scenario(name, Path(tmp))
            target = EXPECTED / name
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for f, text in contents(bundle).items():
                (target / f).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
