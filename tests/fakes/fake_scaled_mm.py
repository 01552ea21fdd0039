"""torch._scaled_mm as a GPU build of torch runs it, for one device, with tensor-wise scales only. The rules are
copied from pytorch/pytorch (main as indexed for this project; the release tag of torch 2.13 could not be
pinned): aten/src/ATen/native/cuda/ScaledBlas.cpp (_scaled_mm_out_cuda) and ScaledBlasDeviceUtils.cpp
(scaled_mm_arch_allowed).

- 2-D operands; K (mat1 columns) and both dimensions of mat2 multiples of 16;
- mat1 row-major, mat2 column-major ("Only works if mat1 is row-major and mat2 is column-major");
- float32 scalar scales; the product accumulates in fp32 and is rounded to `out_dtype`;
- the fp8 variant the device takes: gfx942 the fnuz types (`_scaled_mm_is_fnuz()` is true only there),
  gfx950 only OCP e4m3fn/e5m2 ("gfx950 and gfx120x only support OCP fp8"), CUDA the OCP types (cuBLASLt has no
  fnuz types).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from xmfu.harness.machine.platform import DeviceInfo

ROCM_ARCHES = ("gfx942", "gfx950", "gfx1200", "gfx1201", "gfx1250")  # scaled_mm_arch_allowed on ROCm


def _accepted(device: DeviceInfo) -> tuple[Any, ...]:
    arch = (device.arch or "").split(":")[0]
    if device.kind == "rocm" and arch == "gfx942":
        return (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)
    if device.kind == "rocm" and arch not in ROCM_ARCHES:
        raise RuntimeError("torch._scaled_mm is only supported on CUDA devices with compute capability >= 9.0 "
                           "or 8.9, or ROCm MI300+")
    return (torch.float8_e4m3fn, torch.float8_e5m2)


def fake_scaled_mm(device: DeviceInfo) -> Callable[..., torch.Tensor]:
    accepted = _accepted(device)

    def scaled_mm(mat1, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                  use_fast_accum=False) -> torch.Tensor:
        if mat1.dim() != 2 or mat2.dim() != 2 or mat1.shape[1] != mat2.shape[0]:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")
        if mat1.shape[1] % 16 or mat2.shape[0] % 16 or mat2.shape[1] % 16:
            raise RuntimeError(f"mat2 shape {tuple(mat2.shape)} must be divisible by 16")
        for name, m in (("mat1", mat1), ("mat2", mat2)):
            if m.dtype not in accepted:
                raise RuntimeError(f"{name} is {m.dtype}; {device.name} takes {accepted}")
        if mat1.stride(1) != 1 or mat2.stride(0) != 1:
            raise RuntimeError("mat1 must be row-major and mat2 column-major")
        for scale in (scale_a, scale_b):
            if scale.numel() != 1 or scale.dtype != torch.float32:
                raise RuntimeError("For TensorWise scaling, scales should be float and singletons")
        product = (mat1.to(torch.float32) @ mat2.to(torch.float32)) * scale_a * scale_b
        return product.to(out_dtype or mat1.dtype)

    return scaled_mm
