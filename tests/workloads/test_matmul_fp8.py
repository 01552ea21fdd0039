"""fp8 matmul in the e4m3 variant of the device: e4m3fnuz on MI300-class parts, OCP e4m3fn elsewhere. Run on a
fake GPU (tests/fakes/fake_gpu.py) with a fake torch._scaled_mm that keeps the real per-architecture rules
(tests/fakes/fake_scaled_mm.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.conftest import gpu_device, refused_here, run_config
from tests.fakes.fake_gpu import fake_gpu
from tests.fakes.fake_scaled_mm import fake_scaled_mm
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.platform import DeviceInfo, Platform
from xmfu.harness.run import plan_phases
from xmfu.workloads.catalog import build_registry
from xmfu.workloads.matmul import spec
from xmfu.workloads.matmul import torch as torch_backend

MI300X = gpu_device("AMD Instinct MI300X", 304, memory_gb=206, kind="rocm", vendor="amd",
                    arch="gfx942:sramecc+:xnack-")
MI355X = gpu_device("AMD Instinct MI355X", 256, memory_gb=309, kind="rocm", vendor="amd",
                    arch="gfx950:sramecc+:xnack-")
H100 = gpu_device("NVIDIA H100 80GB HBM3", 132, compute_capability="9.0")


def _ctx(device) -> RunContext:
    return RunContext(run_config(dtype="fp8"), Platform(device.kind, (device,), "test"))


@pytest.mark.parametrize(("device", "fmt"), [(MI300X, "e4m3fnuz"), (MI355X, "e4m3fn"), (H100, "e4m3fn")])
def test_fp8_matmul_runs_in_the_devices_e4m3_variant(device, fmt, monkeypatch):
    (case,) = spec.for_device(spec.expand({"name": "matmul", "shapes": [[40, 32, 48]]}, "fp8", 0), device)
    assert case.fp8_format == fmt and case.params()["fp8_format"] == fmt
    monkeypatch.setattr(torch, "_scaled_mm", fake_scaled_mm(device))
    ctx = _ctx(device)
    with fake_gpu(0, device.kind):
        ok, why = torch_backend.available(case, ctx)
        assert ok, why
        prepared = torch_backend.prepare(case, ctx)
        check = case.check(prepared.result(None))
    assert check.ok, check
    assert prepared.notes["fp8_format"] == fmt and fmt in check.checked


def test_the_run_resolves_the_fp8_format_for_its_device():
    cfg = run_config(dtype="fp8", workload={"name": "matmul", "sizes": [64]})
    phases = plan_phases(cfg, build_registry(), MI300X)
    assert {c.fp8_format for p in phases for c in p.cases} == {"e4m3fnuz"}
    assert {c.fp8_format for p in plan_phases(cfg, build_registry(), H100) for c in p.cases} == {"e4m3fn"}
    bf16 = plan_phases(run_config(dtype="bf16"), build_registry(), MI300X)
    assert {c.fp8_format for p in bf16 for c in p.cases} == {None} and "fp8_format" not in bf16[-1].cases[0].params()


def test_an_fp8_case_in_another_devices_format_is_refused():
    case = spec.MatmulCase(64, 64, 64, "fp8", fp8_format="e4m3fn")
    with fake_gpu(0, "rocm"):
        ok, why = torch_backend.available(case, _ctx(MI300X))
    assert not ok and "e4m3fnuz" in why
    with fake_gpu(0):
        ok, why = torch_backend.available(replace(case, fp8_format=None), _ctx(H100))
    assert not ok and "format" in why


def test_fp8_shapes_scaled_mm_cannot_take_are_skipped_with_the_reason():
    case = spec.MatmulCase(64, 30, 64, "fp8", fp8_format="e4m3fn")  # N = 30: not a multiple of 16
    with fake_gpu(0):
        ok, why = torch_backend.available(case, _ctx(H100))
    assert not ok and "16" in why


@pytest.mark.parametrize("backend", ["triton", "triton_persistent", "jax"])
@pytest.mark.parametrize("fmt", ["e4m3fn", "e4m3fnuz"])
def test_triton_and_jax_compute_fp8_in_either_format(backend, fmt, cpu_ctx):
    """On the CPU (Triton's interpreter, XLA's CPU dot) both formats, inputs rounded to each: the same check as
    torch._scaled_mm's rows, so the mamf fp8 part compares the three backends on equal terms."""
    from xmfu.workloads.matmul import jax as jax_backend
    from xmfu.workloads.matmul import triton as triton_backend
    from xmfu.workloads.matmul import triton_persistent

    module = {"triton": triton_backend, "triton_persistent": triton_persistent, "jax": jax_backend}[backend]
    case = spec.MatmulCase(67, 45, 48, "fp8", transpose_b=True, fp8_format=fmt)  # off the tile multiples
    prepared = module.prepare(case, cpu_ctx)
    prepared.fn()
    check = case.check(prepared.result(None))
    assert check.ok, check
    assert prepared.notes["fp8_format"] == fmt


@pytest.mark.parametrize("backend", ["triton", "jax"])
def test_fp8_on_a_cpu_is_offered_in_the_cpus_format(backend, cpu_ctx):
    from xmfu.workloads.matmul import jax as jax_backend
    from xmfu.workloads.matmul import triton as triton_backend

    module = {"triton": triton_backend, "jax": jax_backend}[backend]
    (case,) = spec.for_device([spec.MatmulCase(64, 64, 64, "fp8")], cpu_ctx.device)
    # a stack without JAX, or an interpreter too old for xmfu's kernels, refuses every dtype (scripts/compat.sh)
    if why := refused_here(backend):
        assert module.available(case, cpu_ctx) == (False, why)
        pytest.skip(f"this stack cannot run it: {why}")
    assert module.available(case, cpu_ctx) == (True, "")
    ok, why = module.available(replace(case, fp8_format="e4m3fnuz"), cpu_ctx)
    assert not ok and "e4m3fn" in why


def test_jax_fp8_runs_where_xla_has_an_fp8_gemm():
    """XLA: fp8 GEMMs on gfx942 (fnuz) and gfx950 (OCP) (rocm_compute_capability.h), on NVIDIA from Hopper; an fp8
    dot elsewhere is converted to f16 and would be timed as fp8."""
    from xmfu.workloads.matmul import jax as jax_backend

    a100 = gpu_device("NVIDIA A100-SXM4-80GB", 108, compute_capability="8.0")
    l4 = gpu_device("NVIDIA L4", 58, compute_capability="8.9")
    mi250 = gpu_device("AMD Instinct MI250X", 220, kind="rocm", vendor="amd", arch="gfx90a:sramecc+:xnack-")
    tpu = gpu_device("TPU v5 lite", kind="tpu", vendor="google")
    expected = [(MI300X, True), (MI355X, True), (H100, True), (a100, False), (l4, False), (mi250, False), (tpu, False)]
    for device, ok in expected:
        (case,) = spec.for_device([spec.MatmulCase(64, 64, 64, "fp8")], device)
        why = jax_backend.fp8_unavailable(case, device.kind, device)
        assert (why is None) is ok, (device.name, why)


def test_a_trainium2_core_gets_e5m2_cases_and_the_torch_gemm_says_why_it_cannot_run_them():
    """Trainium 1/2 refuse e4m3fn (peaks.yaml fp8_formats): the cases are made in e5m2, never in a format the
    part would refuse, and torch._scaled_mm's CUDA/ROCm-only rule is the reason the row gives."""
    trn2 = DeviceInfo(kind="neuron", name="Trainium2", vendor="aws", multiprocessors=2)
    cases = spec.for_device([spec.MatmulCase(64, 64, 64, "fp8")], trn2)
    assert cases[0].fp8_format == "e5m2"
    assert spec.fp8_mismatch(cases[0], "neuron", trn2) is None
    assert "e5m2" in spec.fp8_mismatch(replace(cases[0], fp8_format="e4m3fn"), "neuron", trn2)
    assert "NVIDIA" in torch_backend._fp8_unavailable(cases[0], "neuron", trn2)
