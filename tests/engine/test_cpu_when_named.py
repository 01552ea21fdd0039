"""Backends whose CPU preparation takes tens of seconds per case (Inductor, Pallas' and Helion's interpreters) run on
a CPU only when named: `backends: null` (make bench, experiment=smoke) skips them with the reason and how to run
them; named, or on an accelerator, they run like any other."""

from __future__ import annotations

from dataclasses import replace

from tests.conftest import run_config
from xmfu.harness.engine.attempts import prepare_and_check
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.platform import Platform, cpu_device
from xmfu.workloads.catalog import build_registry

SLOW_ON_CPU = {("matmul", "torch_compile"), ("matmul", "jax_pallas"), ("matmul", "helion"),
               ("attention", "torch_flex"), ("attention", "jax_pallas"), ("attention", "helion")}


def test_the_catalog_marks_exactly_the_backends_that_compile_for_seconds_per_case_on_a_cpu():
    registry = build_registry()
    marked = {(w, b) for w, names in registry.backends_by_workload().items() for b in names
              if registry.workload(w).implementations[b].cpu_when_named}
    assert marked == SLOW_ON_CPU


def test_unnamed_on_a_cpu_the_row_is_skipped_saying_how_to_run_it_and_nothing_is_prepared():
    registry = build_registry()
    workload = registry.workload("matmul")
    cfg = replace(run_config(), backends_named=False)
    ctx = RunContext(cfg, Platform("cpu", (cpu_device(),), "test"))
    case = workload.cases({"name": "matmul", "sizes": [32]}, "fp32", 0)[0]
    attempt = prepare_and_check(case, ctx, workload, "torch_compile")
    assert attempt.status == "skipped" and attempt.prepared is None
    assert attempt.reason.startswith("on a CPU torch_compile runs only when named (Inductor compiles")
    assert "backends=[...,torch_compile] runs it" in attempt.reason
    assert prepare_and_check(case, ctx, workload, "torch").status == "ok"  # the others run as before


def test_named_the_backend_is_asked_as_usual():
    registry = build_registry()
    workload = registry.workload("matmul")
    ctx = RunContext(run_config(), Platform("cpu", (cpu_device(),), "test"))  # parse_run_config: named
    case = workload.cases({"name": "matmul", "sizes": [32]}, "bf16", 0)[0]
    attempt = prepare_and_check(case, ctx, workload, "helion")
    assert "runs only when named" not in (attempt.reason or "")
