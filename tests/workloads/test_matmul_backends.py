"""Each matmul backend on the CPU: prepared, run once, and checked against the fp64 reference."""

from __future__ import annotations

import pytest

from xmfu.workloads.matmul import jax as jax_backend
from xmfu.workloads.matmul import torch as torch_backend
from xmfu.workloads.matmul import triton as triton_backend
from xmfu.workloads.matmul import triton_persistent
from xmfu.workloads.matmul.spec import MatmulCase

BACKENDS = {"torch": torch_backend, "jax": jax_backend, "triton": triton_backend,
            "triton_persistent": triton_persistent}


def _run(module, case, ctx):
    ok, why = module.available(case, ctx)
    assert ok, why
    prepared = module.prepare(case, ctx)
    prepared.fn()
    return case.check(prepared.result(case.check_rows())), prepared


@pytest.mark.parametrize("backend", ["torch", "jax", "triton"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_backend_matches_reference(backend, dtype, cpu_ctx):
    # 67x45x33: not a multiple of any tile size, so Triton's edge masking and wrap-around are exercised.
    check, _ = _run(BACKENDS[backend], MatmulCase(67, 45, 33, dtype), cpu_ctx)
    assert check.ok, check


@pytest.mark.parametrize("backend", ["torch", "jax", "triton", "triton_persistent"])
def test_transposed_operands(backend, cpu_ctx):
    check, _ = _run(BACKENDS[backend], MatmulCase(40, 70, 50, "bf16", transpose_a=True, transpose_b=True), cpu_ctx)
    assert check.ok, check


def test_triton_interpreter_rows_are_not_valid_timings(cpu_ctx):
    _, prepared = _run(triton_backend, MatmulCase(33, 33, 33, "fp32"), cpu_ctx)
    assert prepared.timing_valid is False and "interpreter" in prepared.timing_note
    assert prepared.notes["input_precision"] == "ieee"
    assert prepared.notes["autotune_config"]


def test_fp32_precision_is_pinned_and_recorded(cpu_ctx):
    _, prepared = _run(torch_backend, MatmulCase(16, 16, 16, "fp32"), cpu_ctx)
    assert prepared.notes["fp32_matmul_precision"] == "highest"
    _, prepared = _run(jax_backend, MatmulCase(16, 16, 16, "fp32"), cpu_ctx)
    assert "HIGHEST" in prepared.notes["precision"] and prepared.notes["compile_s"] > 0


@pytest.mark.parametrize("backend", ["torch", "jax", "triton", "triton_persistent"])
@pytest.mark.parametrize("dtype", ["tf32", "fp8"])
def test_unsupported_dtypes_on_cpu_are_skipped_with_a_reason(backend, dtype, cpu_ctx):
    ok, why = BACKENDS[backend].available(MatmulCase(16, 16, 16, dtype), cpu_ctx)
    assert not ok and why


def test_cold_cache_rotates_copies(cpu_ctx):
    from dataclasses import replace

    from xmfu.harness.engine.context import RunContext
    from xmfu.harness.engine.settings import TimingConfig

    cold = RunContext(replace(cpu_ctx.config, timing=TimingConfig(cold_cache=True)), cpu_ctx.platform)
    case = MatmulCase(256, 256, 256, "fp32")
    _, prepared = _run(torch_backend, case, cold)
    assert prepared.notes["input_copies"] == cold.input_copies(case.input_bytes()) > 1


def test_jax_refuses_to_time_the_host_for_a_gpu_run():
    from xmfu.harness.machine.frameworks import jax_backend_matches

    ok, why = jax_backend_matches("cuda")  # this machine's jaxlib is the CPU build
    assert not ok and "jax[cuda12]" in why


def test_triton_configs_are_vendor_specific():
    from xmfu.kernels import matmul as kernel

    amd = [c.kwargs for c in kernel.amd_configs()]
    nvidia = [c.kwargs for c in kernel.nvidia_configs()]
    assert all("waves_per_eu" in k for k in amd) and any("matrix_instr_nonkdim" in k for k in amd)
    assert not any("waves_per_eu" in k or "matrix_instr_nonkdim" in k for k in nvidia)
    assert kernel.interpreting() and len(kernel.autotune_configs()) == 1  # one small tile in the interpreter


def test_jax_measures_this_process_local_device(monkeypatch):
    """Under torchrun each process owns one GPU: jax.local_devices() holds it, while jax.devices() lists every
    process's devices (indexing it by the local rank picks another process's GPU)."""
    import jax

    from tests.conftest import gpu_device, run_config
    from xmfu.harness.engine.context import RunContext
    from xmfu.harness.machine.platform import Platform

    mine = jax.local_devices()[0]
    elsewhere = ["process 0's device", "process 1's device"]
    monkeypatch.setattr(jax, "devices", lambda backend=None: elsewhere)
    monkeypatch.setattr(jax, "local_devices", lambda process_index=None, backend=None, host_id=None: [mine])
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}.items():
        monkeypatch.setenv(key, value)
    plat = Platform("cuda", (gpu_device("H100", index=0), gpu_device("H100", index=1)), "test")
    ctx = RunContext(run_config(), plat)
    assert ctx.device.index == 1
    prepared = jax_backend.prepare(MatmulCase(16, 16, 16, "fp32"), ctx)
    assert prepared.notes["jax_device"] == str(mine)


def test_no_jax_workload_indexes_the_global_device_list():
    """Only collectives span every process's devices (jax.devices(), on purpose); the rest use their own."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "workloads"
    offenders = [str(p) for p in root.glob("*/jax.py") if "jax.devices()[" in p.read_text()]
    assert not offenders


def test_the_interpreter_checks_a_large_case_at_a_small_size_and_never_times_it(cpu_ctx):
    from xmfu.harness.engine.attempts import prepare_and_check
    from xmfu.workloads.catalog import build_registry
    from xmfu.workloads.matmul.spec import MatmulCase

    case = MatmulCase(4096, 4096, 1024, "fp32")
    attempt = prepare_and_check(case, cpu_ctx, build_registry().workload("matmul"), "triton")
    assert attempt.status == "ok", attempt.reason
    assert attempt.check["ok"] and attempt.check["case_id"] == "matmul-fp32-200x136x152-NN"
    assert not attempt.prepared.timing_valid and "checked at 200x136x152" in attempt.prepared.timing_note
    from xmfu.harness.results.bundle.writer import checked
    from xmfu.harness.results.schema.parts import Correctness

    assert checked(attempt.check, Correctness, "correctness")  # the bundle's record takes the checked case's id
