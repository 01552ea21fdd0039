"""flash_attn and aiter attention backends: every detection and skip path, and the calls they make checked against
the fp64 reference through fakes with the libraries' real signatures and mask semantics.
"""

from __future__ import annotations

import importlib.metadata

import pytest

from tests.conftest import gpu_device, run_config
from tests.fakes import flash_attn_fake as fakes
from tests.fakes.fake_gpu import fake_gpu
from xmfu.harness.engine.case import Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.platform import Platform
from xmfu.workloads.attention import amd_aiter, flash_attn
from xmfu.workloads.attention.spec import AttentionCase

H100 = gpu_device("NVIDIA H100 80GB HBM3", 132, compute_capability="9.0")
A100 = gpu_device("NVIDIA A100-SXM4-80GB", 108, compute_capability="8.0")
V100 = gpu_device("Tesla V100-SXM2-32GB", 80, compute_capability="7.0")
MI300X = gpu_device("AMD Instinct MI300X", 304, memory_gb=206, kind="rocm", vendor="amd", arch="gfx942:sramecc+:xnack-")


def _ctx(device) -> RunContext:
    return RunContext(run_config(dtype="bf16"), Platform(device.kind, (device,), "test"))


def _case(sq=19, skv=37, causal=True, alignment="bottom_right", dtype="bf16", mode="fwd", heads=4, kv=2, d=64):
    return AttentionCase(1, heads, kv, sq, skv, d, causal, alignment, d**-0.5, dtype, mode)


@pytest.fixture
def no_libraries(monkeypatch):
    """Whatever this machine has, the libraries are absent unless a test installs a fake."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.split(".")[0] in (
        "flash_attn", "flash_attn_interface", "aiter") and name not in __import__("sys").modules else real(name, *a))


def _run(module, case, device):
    with fake_gpu(0, device.kind):
        ok, why = module.available(case, _ctx(device))
        assert ok, why
        prepared = module.prepare(case, _ctx(device))
        prepared.fn()
        return case.check(prepared.result(case.check_rows())), prepared.notes


def test_flash_attn_on_a_cpu_is_skipped_with_the_reason(cpu_ctx):
    ok, why = flash_attn.available(_case(), cpu_ctx)
    assert not ok and "NVIDIA and AMD GPUs only; this is a cpu device" in why


def test_flash_attn_not_installed_names_the_package(no_libraries):
    with fake_gpu(0):
        ok, why = flash_attn.available(_case(), _ctx(A100))
    assert not ok and why.startswith("flash_attn is not installed (pip install flash-attn")


@pytest.mark.parametrize(("case", "device", "reason"), [
    (_case(dtype="fp32"), A100, "takes fp16 and bf16 only, not fp32"),
    (_case(d=72 + 4), A100, "head_dim a multiple of 8 and at most 256, not 76"),
    (_case(), V100, "compute capability 8.0+ (Ampere or newer), this device is 7.0"),
    (_case(alignment="top_left"), A100, "top-left with seq_q < seq_kv would need a negative right window"),
])
def test_flash_attn_refuses_what_the_library_cannot_do(monkeypatch, case, device, reason):
    fakes.install_flash_attn(monkeypatch)
    with fake_gpu(0):
        ok, why = flash_attn.available(case, _ctx(device))
    assert not ok and reason in why


@pytest.mark.parametrize(("sq", "skv", "causal", "alignment", "mask"), [
    (19, 37, True, "bottom_right", "causal=True (bottom-right)"),
    (33, 21, True, "top_left", "top-left as the local window (-1, 12)"),
    (23, 23, True, "top_left", "causal=True (bottom-right)"),
    (17, 29, False, "top_left", "no mask"),
])
def test_flash_attn_2_calls_match_the_reference(monkeypatch, sq, skv, causal, alignment, mask):
    fakes.install_flash_attn(monkeypatch)
    mode = "fwd_bwd" if sq == 19 else "fwd"  # one case checks the gradients through the transposed views
    check, notes = _run(flash_attn, _case(sq, skv, causal, alignment, mode=mode), A100)
    assert check.ok, check
    assert notes["mask"] == mask and notes["library_version"] == "2.8.4"
    assert notes["kernel"] == "flash_attn_2_cuda (CUDA)" and notes["library"] == "flash_attn (FlashAttention-2)"


def test_flash_attn_3_is_used_on_hopper_when_installed(monkeypatch):
    fakes.install_flash_attn(monkeypatch)
    fakes.install_flash_attn_3(monkeypatch)
    check, notes = _run(flash_attn, _case(dtype="fp16", mode="fwd"), H100)
    assert check.ok, check
    assert notes["library"] == "flash_attn_interface (FlashAttention-3)" and notes["kernel"] == "flash_attn_3._C (sm90)"
    _, notes = _run(flash_attn, _case(dtype="fp16", mode="fwd"), A100)  # not Hopper: FlashAttention-2
    assert notes["library"] == "flash_attn (FlashAttention-2)"


@pytest.mark.parametrize(("triton", "kernel"), [(False, "Composable Kernel"), (True, "Triton (AITER's")])
def test_flash_attn_on_rocm_records_ck_or_triton(monkeypatch, triton, kernel):
    fakes.install_flash_attn(monkeypatch, rocm_triton=triton)
    check, notes = _run(flash_attn, _case(mode="fwd"), MI300X)
    assert check.ok, check
    assert notes["kernel"].startswith(kernel)


def test_aiter_off_rocm_is_skipped_and_names_a_wrong_package(cpu_ctx, monkeypatch):
    ok, why = amd_aiter.available(_case(), cpu_ctx)
    assert not ok and why.startswith("AITER runs on AMD GPUs (ROCm) only; this is a cpu device")
    fakes.install_pypi_aiter(monkeypatch)
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: {"aiter": ["aiter"]})
    ok, why = amd_aiter.available(_case(), cpu_ctx)
    assert not ok and "besides: the installed `aiter` (aiter) is not AMD's AITER" in why


def test_aiter_not_installed(no_libraries):
    with fake_gpu(0, "rocm"):
        ok, why = amd_aiter.available(_case(), _ctx(MI300X))
    assert not ok and why == "aiter is not installed (pip install amd-aiter, or build ROCm/aiter)"


def test_pypi_aiter_is_told_apart_by_its_api(monkeypatch):
    fakes.install_pypi_aiter(monkeypatch)  # no distribution metadata: the API decides
    monkeypatch.setattr(importlib.metadata, "packages_distributions", lambda: {})
    with fake_gpu(0, "rocm"):
        ok, why = amd_aiter.available(_case(), _ctx(MI300X))
        assert not ok and "0.13.20191203) is not AMD's AITER: it has no flash_attn_func" in why
        assert "asynchronous-iterator library" in why
        with pytest.raises(Unavailable, match="not AMD's AITER"):
            amd_aiter.prepare(_case(), _ctx(MI300X))


@pytest.mark.parametrize(("enable_ck", "kernel"), [(True, "CK/assembly"), (False, "Triton (aiter.ops.triton")])
@pytest.mark.parametrize(("sq", "skv", "alignment"), [(19, 37, "bottom_right"), (33, 21, "top_left")])
def test_aiter_calls_match_the_reference(monkeypatch, enable_ck, kernel, sq, skv, alignment):
    fakes.install_amd_aiter(monkeypatch, enable_ck=enable_ck)
    if not enable_ck:  # the Triton path takes a two-element window: the fake checks three, so give it its own
        monkeypatch.setattr(fakes, "aiter_flash_attn_func", fakes.flash_attn_2_func)
        fakes.install_amd_aiter(monkeypatch, enable_ck=False)
    check, notes = _run(amd_aiter, _case(sq, skv, True, alignment), MI300X)
    assert check.ok, check
    assert notes["kernel"].startswith(kernel) and notes["library"] == "aiter (AMD AITER)"


def test_aiter_refuses_fp32(monkeypatch):
    fakes.install_amd_aiter(monkeypatch)
    with fake_gpu(0, "rocm"):
        ok, why = amd_aiter.available(_case(dtype="fp32"), _ctx(MI300X))
    assert not ok and "fp16 and bf16" in why


@pytest.mark.parametrize("deterministic", [False, True])
def test_deterministic_is_passed_to_every_flash_library_and_recorded(monkeypatch, deterministic):
    """AITER's flash_attn_func defaults to deterministic=True (aiter/ops/mha.py at e4048607), FA2's and FA3's to
    False: every call names it as workload.deterministic says, and the row records it."""
    from xmfu.workloads.attention.spec import expand

    fakes.install_flash_attn(monkeypatch)
    fakes.install_flash_attn_3(monkeypatch)
    fakes.install_amd_aiter(monkeypatch)
    (case,) = expand({"name": "attention", "batch": 1, "heads": 4, "kv_heads": 2, "seq_q": 19, "seq_kv": 37,
                      "head_dim": 64, "causal": True, "alignment": "bottom_right", "mode": "fwd_bwd",
                      "deterministic": deterministic}, "bf16", 0)
    assert case.deterministic is deterministic and case.params().get("deterministic") == (deterministic or None)
    for module, device, library in ((flash_attn, A100, "FlashAttention-2"), (flash_attn, H100, "FlashAttention-3"),
                                    (amd_aiter, MI300X, "AITER")):
        fakes.CALLS.clear()
        check, notes = _run(module, case, device)
        assert check.ok, check
        assert library in notes["library"]
        assert fakes.CALLS and all(call["deterministic"] is deterministic for call in fakes.CALLS), library
        assert notes["deterministic"] is deterministic
