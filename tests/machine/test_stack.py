"""The vendor stack settings recorded in rows and environments, and the TunableOp tuning session."""

from __future__ import annotations

import sys

from tests.conftest import run_config
from tests.fakes.torch_stack import fake_torch
from xmfu.harness.engine.settings import RocmConfig
from xmfu.harness.machine import stack
from xmfu.harness.run import tunableop_session


def test_rocm_settings_are_read_by_name():
    torch = fake_torch()
    settings = stack.torch_settings("rocm", torch)
    assert settings["blas_library"] == "Cublaslt" and settings["rocm_flash_attention_library"] == "AOTriton"
    assert settings["tunableop"] == {"available": True, "enabled": False, "tuning": False,
                                     "filename": "tunableop_results.csv", "max_tuning_duration_ms": 30,
                                     "max_tuning_iterations": 100}
    assert settings["sdpa_enabled"]["cudnn"] is False and settings["cudnn"]["version"] == 3_003_000


def test_cuda_settings_have_no_rocm_fields_and_cpus_have_none(monkeypatch):
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", "32768")
    settings = stack.torch_settings("cuda", fake_torch())
    assert "rocm_flash_attention_library" not in settings
    assert settings["env"] == {"CUBLASLT_WORKSPACE_SIZE": "32768"}
    assert stack.torch_settings("cpu", fake_torch()) is None


def test_a_missing_api_reads_as_none():
    torch = fake_torch()
    del torch.backends.cuda.preferred_rocm_fa_library
    assert stack.torch_settings("rocm", torch)["rocm_flash_attention_library"] is None


def test_tunableop_session_on_rocm_tunes_into_a_scratch_file_and_exports_the_table(monkeypatch):
    torch = fake_torch(tuned=[("GemmTunableOp_BFloat16_NT", "nt_4096_4096_4096", "Gemm_Hipblaslt_1234", 0.51)])
    monkeypatch.setitem(sys.modules, "torch", torch)
    cfg = run_config(rocm=RocmConfig(tunableop=True, tunableop_max_tuning_ms=50).__dict__)
    state = tunableop_session(cfg, "rocm")
    assert state["applied"] and state["enabled"] and state["tuning"] and state["max_tuning_duration_ms"] == 50
    assert "xmfu-tunableop-" in state["filename"]  # torch's own exit-time file stays outside the bundle
    table = stack.tunableop_results(torch).splitlines()
    assert table[0] == "Validator,PT_VERSION,2.13.0"
    assert table[-1] == "GemmTunableOp_BFloat16_NT,nt_4096_4096_4096,Gemm_Hipblaslt_1234,0.51"


def test_tunableop_elsewhere_is_recorded_as_not_applied():
    cfg = run_config(rocm={"tunableop": True})
    assert tunableop_session(cfg, "cuda") == {
        "applied": False, "reason": "rocm.tunableop applies to ROCm devices; this run is on cuda"}
    assert tunableop_session(run_config(), "rocm") is None
    assert tunableop_session(cfg, "rocm", ("jax",))["applied"] is False  # nothing of torch's to tune, no torch import
