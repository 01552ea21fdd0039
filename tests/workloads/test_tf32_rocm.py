"""tf32 on ROCm is tf32 work or no row: HIPBLASLT_ALLOW_TF32 is set for parts with TF32 matrix units (gfx94x),
torch's own answer is read back into the row, and parts without TF32 are skipped with the reason (issue 25,
item 5). Runs the real CPU torch on a fake GPU (tests/fakes/fake_gpu.py) with torch._C._get_cublas_allow_tf32
replaced by the ROCm rule of pytorch/pytorch#143549 (aten/src/ATen/Context.cpp, `allowTF32CuBLAS()` under USE_ROCM:
false unless `c10::utils::check_env("HIPBLASLT_ALLOW_TF32")`, read per call since #147186)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import gpu_device, run_config
from tests.fakes.fake_gpu import fake_gpu
from xmfu.harness.engine.case import Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import environment, stack
from xmfu.harness.machine.platform import Platform
from xmfu.workloads.attention import spec as attention_spec
from xmfu.workloads.attention import torch_sdpa
from xmfu.workloads.matmul import spec
from xmfu.workloads.matmul import torch as torch_backend

ENV = "HIPBLASLT_ALLOW_TF32"
MI300X = gpu_device("AMD Instinct MI300X", 304, memory_gb=206, kind="rocm", vendor="amd",
                    arch="gfx942:sramecc+:xnack-")
MI355X = gpu_device("AMD Instinct MI355X", 256, memory_gb=309, kind="rocm", vendor="amd",
                    arch="gfx950:sramecc+:xnack-")


@pytest.fixture
def rocm_torch(monkeypatch):
    """torch as a ROCm build between #143549 and the variable's removal answers allow_tf32."""
    monkeypatch.setenv(ENV, "")
    monkeypatch.delenv(ENV)  # absent now, and absent again after the test
    real = torch._C._get_cublas_allow_tf32
    monkeypatch.setattr(torch._C, "_get_cublas_allow_tf32",
                        lambda: real() and __import__("os").environ.get(ENV) in ("1", "ON", "YES", "TRUE", "Y"))
    yield
    torch.set_float32_matmul_precision("highest")


def _ctx(device) -> RunContext:
    return RunContext(run_config(dtype="tf32"), Platform(device.kind, (device,), "test"))


def test_tf32_matmul_on_mi300x_sets_the_variable_and_reads_torch_back(rocm_torch):
    case = spec.MatmulCase(64, 48, 32, "tf32")
    with fake_gpu(0, "rocm"):
        ok, why = torch_backend.available(case, _ctx(MI300X))
        assert ok, why
        prepared = torch_backend.prepare(case, _ctx(MI300X))
    state = prepared.notes["tf32"]
    assert state["allow_tf32"] is True and state[ENV] == "1"
    assert state["float32_matmul_precision"] == "high"


def test_tf32_that_torch_refuses_is_skipped_not_timed_as_fp32(rocm_torch, monkeypatch):
    monkeypatch.setenv(ENV, "0")  # the user's choice is kept, and torch then says no
    case = spec.MatmulCase(64, 48, 32, "tf32")
    with fake_gpu(0, "rocm"), pytest.raises(Unavailable, match="allow_tf32 False with HIPBLASLT_ALLOW_TF32=0"):
        torch_backend.prepare(case, _ctx(MI300X))


def test_tf32_on_a_part_without_tf32_units_is_skipped_with_the_reason():
    case = spec.MatmulCase(64, 48, 32, "tf32")
    with fake_gpu(0, "rocm"):
        ok, why = torch_backend.available(case, _ctx(MI355X))
    assert not ok and "gfx950" in why and "TF32 matrix instructions" in why


def test_tf32_attention_is_skipped_on_a_part_without_tf32_units():
    case = attention_spec.AttentionCase(1, 2, 2, 32, 32, 16, False, "top_left", 0.25, "tf32", "fwd")
    with fake_gpu(0, "rocm"):
        ok, why = torch_sdpa.available(case, _ctx(MI355X))
    assert not ok and "gfx950" in why


def test_amd_math_library_variables_are_recorded(monkeypatch):
    for name, value in ((ENV, "1"), ("MIOPEN_FIND_MODE", "FAST"), ("ROCBLAS_LAYER", "2"),
                        ("HIPBLASLT_LOG_LEVEL", "0")):
        monkeypatch.setenv(name, value)
    env = environment.relevant_env()
    assert {ENV, "MIOPEN_FIND_MODE", "ROCBLAS_LAYER", "HIPBLASLT_LOG_LEVEL"} <= set(env)
    assert {ENV, "MIOPEN_FIND_MODE", "ROCBLAS_LAYER", "HIPBLASLT_LOG_LEVEL"} <= set(stack.stack_env())
