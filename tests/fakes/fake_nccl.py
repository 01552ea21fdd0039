"""A one-rank `torch.distributed` whose process group is NCCL-only, as torch 2.13 builds it for
`init_process_group("nccl")`. Copied from the real rules (pytorch/pytorch, torch 2.13):

- a tensor collective resolves its backend from the tensor's device type; an nccl group registers only "cuda",
  so a host tensor fails with "No backend type associated with device type cpu"
  (torch/csrc/distributed/c10d/ProcessGroup.cpp, ProcessGroup::getBackend);
- object collectives (all_gather_object) serialise onto `_get_object_coll_device(group)`, which is "cuda" for an
  nccl-only group, i.e. onto torch.cuda.current_device(): each rank must have called torch.cuda.set_device for
  its own GPU (torch/distributed/distributed_c10d.py, all_gather_object docstring and _get_object_coll_device);
- barrier() allocates its one-element all_reduce on the current device likewise (distributed_c10d.py, barrier).

With one rank the collectives' data results are the identity (or a copy), as NCCL's are.
"""

from __future__ import annotations

from typing import Any

import torch


class FakeNcclDist:
    """Stands in for the `torch.distributed` module; install with `install(monkeypatch)`."""

    def __init__(self, own_gpu: int, initialized: bool = False) -> None:
        self.own_gpu = own_gpu  # the GPU this rank must use (its LOCAL_RANK)
        self.current_gpu = 0  # torch.cuda.current_device(): 0 until set_device
        self.initialized = initialized
        self.init_calls: list[tuple[Any, ...]] = []

    # process group ------------------------------------------------------------------------------------------
    class HashStore:
        pass

    def is_initialized(self) -> bool:
        return self.initialized

    def init_process_group(self, backend: str | None = None, **kwargs: Any) -> None:
        self.init_calls.append((backend, kwargs))
        self.initialized = True

    def destroy_process_group(self, group: Any = None) -> None:
        self.initialized = False

    def get_rank(self, group: Any = None) -> int:
        return 0

    def get_world_size(self, group: Any = None) -> int:
        return 1

    def get_backend(self, group: Any = None) -> str:
        return "nccl"

    # device rules -------------------------------------------------------------------------------------------
    @staticmethod
    def _backend_for(*tensors: torch.Tensor) -> None:
        for t in tensors:
            if t.device.type != "cuda":
                raise RuntimeError(f"No backend type associated with device type {t.device.type}")

    def _on_own_gpu(self, what: str) -> None:
        if self.current_gpu != self.own_gpu:
            raise RuntimeError(f"{what} ran on cuda:{self.current_gpu} (torch.cuda.current_device()) but this "
                               f"rank's GPU is cuda:{self.own_gpu}: ranks would share a GPU (NCCL: Duplicate GPU)")

    # collectives --------------------------------------------------------------------------------------------
    def all_reduce(self, tensor: torch.Tensor, op: Any = None, group: Any = None, async_op: bool = False) -> None:
        self._backend_for(tensor)

    def broadcast(self, tensor: torch.Tensor, src: int = 0, group: Any = None, async_op: bool = False) -> None:
        self._backend_for(tensor)

    def all_gather_single(self, output_tensor, input_tensor, group=None, async_op=False) -> None:
        self._backend_for(output_tensor, input_tensor)
        output_tensor.copy_(input_tensor)

    def reduce_scatter_single(self, output, input, op=None, group=None, async_op=False) -> None:
        self._backend_for(output, input)
        output.copy_(input)

    def all_to_all_single(self, output, input, output_split_sizes=None, input_split_sizes=None,
                          group=None, async_op=False) -> None:
        self._backend_for(output, input)
        output.copy_(input)

    def barrier(self, group: Any = None, async_op: bool = False, device_ids: Any = None, timeout: Any = None) -> None:
        self._on_own_gpu("barrier")

    def all_gather_object(self, object_list: list[Any], obj: Any, group: Any = None) -> None:
        self._on_own_gpu("all_gather_object")
        object_list[0] = obj

    # installation -------------------------------------------------------------------------------------------
    def install(self, monkeypatch: Any) -> None:
        """Replace torch.distributed, torch.cuda.set_device/current_device and the NCCL version query."""
        import sys

        monkeypatch.setitem(sys.modules, "torch.distributed", self)
        monkeypatch.setattr(torch, "distributed", self)
        monkeypatch.setattr(torch.cuda, "set_device", self._set_device)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current_gpu)
        monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))

    def _set_device(self, device: Any) -> None:
        self.current_gpu = device if isinstance(device, int) else torch.device(device).index
