"""TF32 through torch: whether the part has it, switching it on, and what torch says it will use.

A row labelled tf32 is divided by the tf32 peak, so it must be tf32 work. On ROCm torch's cuBLAS(Lt) flag was not
enough in some releases: the PR that brought TF32 to hipBLASLt GEMMs (pytorch/pytorch#143549, "[reland][AMD] Turn
on TF32 for aten::mm", Dec 2024) made `Context::allowTF32CuBLAS()` under USE_ROCM return false unless the
environment variable HIPBLASLT_ALLOW_TF32 is set (`c10::utils::check_env(hipblaslt_allow_tf32)` in
aten/src/ATen/Context.cpp; read on every call since pytorch/pytorch#147186), whatever `allow_tf32` or
`set_float32_matmul_precision("high")` said, so the GEMM ran in full fp32, about a quarter of MI300X's tf32 peak.
Context.cpp in pytorch/pytorch at 8e9714e no longer reads the variable. Which torch releases carry the check is not
pinned down here, so xmfu sets the variable for a tf32 case on a part with TF32 matrix units, then reads back what
torch reports (`torch.backends.cuda.matmul.allow_tf32` is `allowTF32CuBLAS()`, the value the BLAS call sites use)
and refuses the case when torch still says no: the readback decides, not the version.

Parts with TF32 matrix instructions: CDNA3, gfx94x (MI300X, MI300A, MI325X; ROCm's "MI300 series
microarchitecture" page lists TF32 at 1024 FLOPs/clock/CU). xmfu's peak table has no tf32 entry for CDNA4 (gfx950,
MI355X: AMD lists none), and XLA offers TF32 dots on ROCm from MI100 up except MI350 (`is_rocm_mi100_and_above &&
!is_rocm_mi350` in xla/service/algorithm_util.cc, as quoted in ROCm/jax#720).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

ROCM_TF32_ENV = "HIPBLASLT_ALLOW_TF32"
ROCM_TF32_ARCHES = ("gfx94",)  # gcnArchName prefixes: gfx940, gfx941, gfx942


def rocm_tf32_unavailable(arch: str | None) -> str | None:
    """Why an AMD part cannot run tf32 matrix work, or None."""
    base = (arch or "").split(":")[0]
    if base.startswith(ROCM_TF32_ARCHES):
        return None
    return (f"tf32 needs TF32 matrix instructions (AMD CDNA3, gfx94x); this part is {base or 'of unknown arch'}, "
            "where a tf32 row would be fp32 work divided by a tf32 peak")


def allow_rocm_tf32(environ: MutableMapping[str, str] | None = None) -> str:
    """Set HIPBLASLT_ALLOW_TF32=1 unless the user set it; returns the value in force."""
    env = os.environ if environ is None else environ
    env.setdefault(ROCM_TF32_ENV, "1")
    return env[ROCM_TF32_ENV]


def _read(fn: Any) -> Any:
    try:
        return fn()
    except Exception:  # an older torch without the API, or a mixed legacy/new precision state (TORCH_CHECK)
        return None


def readback(torch: Any) -> dict[str, Any]:
    """What torch will use for fp32 GEMMs now: matmul.allow_tf32 (allowTF32CuBLAS, the value the BLAS call sites
    read), the newer per-backend matmul.fp32_precision, the legacy float32 matmul precision, and the ROCm variable."""
    matmul = torch.backends.cuda.matmul
    return {"allow_tf32": _read(lambda: bool(matmul.allow_tf32)),
            "fp32_precision": _read(lambda: matmul.fp32_precision),
            "float32_matmul_precision": _read(torch.get_float32_matmul_precision),
            ROCM_TF32_ENV: os.environ.get(ROCM_TF32_ENV)}


def tf32_refused(platform_kind: str, state: dict[str, Any]) -> str | None:
    """Why a tf32 case must not be timed given torch's readback, or None."""
    if state.get("allow_tf32"):
        return None
    told = f" with {ROCM_TF32_ENV}={state.get(ROCM_TF32_ENV)}" if platform_kind == "rocm" else ""
    return (f"torch reports matmul.allow_tf32 {state.get('allow_tf32')}{told} after asking for tf32: the GEMM would "
            "be fp32 work, not tf32")


def torch_tf32_on(torch: Any, platform_kind: str) -> tuple[dict[str, Any], str | None]:
    """Ask torch for tf32 fp32 GEMMs (on ROCm with HIPBLASLT_ALLOW_TF32 set first); returns (readback, why the case
    must be refused or None)."""
    if platform_kind == "rocm":
        allow_rocm_tf32()
    torch.set_float32_matmul_precision("high")
    state = readback(torch)
    return state, tf32_refused(platform_kind, state)
