"""A stand-in CUDA device for a CPU-only torch: tensors asked for on `cuda:N` are made on the CPU but report
`device == cuda:N`, so code that must put a tensor on the GPU can be told apart from code that leaves it on the
host. Copies torch 2.13's behaviour only as far as placement goes: `.cpu()` / `.to("cpu")` give a host tensor,
everything computed from a GPU tensor stays on the GPU (torch/overrides.py TorchFunctionMode and
torch.Tensor.__torch_function__, which keeps the subclass of the operands).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


def _is_gpu(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith("cuda")
    return isinstance(value, torch.device) and value.type == "cuda"


class OnGpu(torch.Tensor):
    """A host tensor that says it lives on cuda:`index`."""

    index = 0

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cuda", self.index)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        to_host = func is torch.Tensor.cpu or (func is torch.Tensor.to and any(
            str(a) == "cpu" for a in (*args[1:], *(kwargs or {}).values())))
        return out.as_subclass(torch.Tensor) if to_host and isinstance(out, torch.Tensor) else out


class _GpuPlacement(TorchFunctionMode):
    def __init__(self, gpu: type[OnGpu]) -> None:
        super().__init__()
        self.gpu = gpu

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        gpu = _is_gpu(kwargs.get("device"))
        if gpu:
            kwargs["device"] = "cpu"
        if func is torch.Tensor.to and any(_is_gpu(a) for a in args[1:]):
            gpu, args = True, tuple("cpu" if _is_gpu(a) else a for a in args)
        out = func(*args, **kwargs)
        return out.as_subclass(self.gpu) if gpu and isinstance(out, torch.Tensor) else out


@contextmanager
def fake_gpu(index: int = 0, kind: str = "cuda") -> Iterator[type[OnGpu]]:
    """Within this block, `cuda:N` tensors are host tensors of type OnGpu reporting cuda:`index`, and torch
    says it is a `kind` build that sees a GPU (torch.cuda.is_available(), torch.version.hip)."""
    gpu = type(f"OnGpu{index}", (OnGpu,), {"index": index})
    saved = torch.cuda.is_available, torch.version.hip
    torch.cuda.is_available = lambda: True
    torch.version.hip = "6.3.42131" if kind == "rocm" else None
    try:
        with _GpuPlacement(gpu):
            yield gpu
    finally:
        torch.cuda.is_available, torch.version.hip = saved
