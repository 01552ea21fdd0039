"""A small copy of the torch settings xmfu records, for testing without a ROCm or CUDA build.

Copies the Python API of torch 2.13: torch/cuda/tunable.py (enable, is_enabled, tuning_enable,
tuning_is_enabled, set_filename(filename, insert_device_ordinal=False), get_filename,
set_max_tuning_duration, get_max_tuning_duration, get_max_tuning_iterations, get_results() -> tuples of
(op signature, params signature, solution, time ms), get_validators() -> (key, value) pairs; no write_file:
torch writes the results file at process exit), torch/backends/cuda/__init__.py (preferred_blas_library() ->
torch._C._BlasBackend, preferred_rocm_fa_library() -> torch._C._ROCmFABackend, *_sdp_enabled(),
is_ck_sdpa_available(), matmul.allow_tf32) and torch/backends/cudnn (enabled, benchmark, allow_tf32, version()).
"""

from __future__ import annotations

import enum
from types import SimpleNamespace


class _BlasBackend(enum.Enum):
    Cublas = 0
    Cublaslt = 1
    Ck = 2


class _ROCmFABackend(enum.Enum):
    Default = 0
    AOTriton = 1
    Ck = 2


def fake_torch(tuned: list[tuple[str, str, str, float]] | None = None) -> SimpleNamespace:
    state = {"enabled": False, "tuning": False, "filename": "tunableop_results.csv", "duration": 30}
    tunable = SimpleNamespace(
        enable=lambda val=True: state.update(enabled=val), is_enabled=lambda: state["enabled"],
        tuning_enable=lambda val=True: state.update(tuning=val), tuning_is_enabled=lambda: state["tuning"],
        set_filename=lambda filename, insert_device_ordinal=False: state.update(filename=filename),
        get_filename=lambda: state["filename"],
        set_max_tuning_duration=lambda duration: state.update(duration=duration),
        get_max_tuning_duration=lambda: state["duration"], get_max_tuning_iterations=lambda: 100,
        get_results=lambda: tuple(tuned or ()),
        get_validators=lambda: (("PT_VERSION", "2.13.0"), ("ROCM_VERSION", "6.3.42131"), ("HIPBLASLT_VERSION", "0.12")),
    )
    cuda_backend = SimpleNamespace(
        preferred_blas_library=lambda backend=None: _BlasBackend.Cublaslt,
        preferred_rocm_fa_library=lambda backend=None: _ROCmFABackend.AOTriton,
        flash_sdp_enabled=lambda: True, mem_efficient_sdp_enabled=lambda: True, math_sdp_enabled=lambda: True,
        cudnn_sdp_enabled=lambda: False, is_ck_sdpa_available=lambda: True,
        matmul=SimpleNamespace(allow_tf32=False, allow_bf16_reduced_precision_reduction=True),
    )
    cudnn = SimpleNamespace(enabled=True, benchmark=False, allow_tf32=True, version=lambda: 3_003_000)
    backends = SimpleNamespace(cuda=cuda_backend, cudnn=cudnn)
    return SimpleNamespace(cuda=SimpleNamespace(tunable=tunable), backends=backends, _state=state)
