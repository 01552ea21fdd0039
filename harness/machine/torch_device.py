"""torch's device-generic runtime calls, in one place: which accelerator torch drives, how many, which is current,
synchronize, events and allocator statistics, through `torch.accelerator` where the installed torch has the call
and through `torch.cuda` where it does not.

What each torch release offers (xmfu supports torch 2.6 to 2.13, machine/compat.py):
- torch 2.6 introduced `torch.accelerator` (pytorch PR #132204, "Introduce a device-agnostic runtime API design";
  docs/2.6 _modules/torch/accelerator): `device_count()`, `is_available()` (device_count() > 0),
  `current_accelerator()` with no argument (it raises where there is no accelerator), `current_device_idx()`,
  `set_device_idx(device)`, `current_stream(device)`, `set_stream(stream)`, `synchronize(device=None)`.
- torch 2.7 renamed the index calls `current_device_index()` / `set_device_index(device)` (the `_idx` names stay,
  deprecated) and gave `current_accelerator(check_available=False)` its argument (docs 2.7 accelerator.rst).
- torch 2.8 added the allocator statistics `torch.accelerator.memory_allocated`, `max_memory_allocated`,
  `reset_peak_memory_stats`, `empty_cache`... (torch/accelerator/memory.py; docs 2.8 accelerator.md); before it
  they are per device module (`torch.cuda.max_memory_allocated`, `torch.xpu.max_memory_allocated`).
- `torch.Event(device=None, *, enable_timing=False, ...)` is the device-generic event (record, synchronize,
  elapsed_time in milliseconds, torch 2.13 docstring); xmfu always passes the device.
Each function takes the torch module so tests can hand it a fake (tests/fakes/torch_accelerator.py).
"""

from __future__ import annotations

from typing import Any

# torch device type -> (xmfu platform kind, vendor). A CUDA-type device is "rocm" on a HIP build (torch.version.hip).
DEVICE_KINDS = {
    "cuda": ("cuda", "nvidia"),
    "xpu": ("xpu", "intel"),  # Intel GPUs, in stock PyTorch
    "hpu": ("hpu", "intel"),  # Gaudi, through Intel's habana_frameworks bridge
    "neuron": ("neuron", "aws"),  # Trainium through TorchNeuron (machine/neuron.py: one device = one logical core)
    "tpu": ("tpu", "google"),  # TorchTPU
}


def accelerator_type(torch: Any) -> str | None:
    """The device type of the accelerator torch drives here ("cuda" for CUDA and ROCm builds, "xpu", "hpu",
    "neuron", "tpu"...), None when it sees none. `torch.accelerator` where present (2.6+); `torch.cuda` before."""
    acc = getattr(torch, "accelerator", None)
    if acc is None:
        return "cuda" if torch.cuda.is_available() else None
    if not acc.is_available():  # 2.6's current_accelerator() raises without one: ask this first
        return None
    device = acc.current_accelerator()
    return None if device is None else str(device.type)


def platform_kind(torch: Any, device_type: str) -> tuple[str, str]:
    """(xmfu platform kind, vendor) of a torch device type; a ROCm build's "cuda" is ("rocm", "amd")."""
    if device_type == "cuda" and getattr(torch.version, "hip", None):
        return "rocm", "amd"
    return DEVICE_KINDS.get(device_type, (device_type, "unknown"))


def device_count(torch: Any) -> int:
    acc = getattr(torch, "accelerator", None)
    return int(acc.device_count()) if acc is not None else int(torch.cuda.device_count())


def set_device(torch: Any, device: str) -> None:
    """Make `device` ("cuda:N", "xpu:N"...) torch's current device: events, synchronize() and graph capture act on
    the current device. 2.7+ `set_device_index`, 2.6 `set_device_idx`, older `torch.cuda.set_device`."""
    acc = getattr(torch, "accelerator", None)
    setter = getattr(acc, "set_device_index", None) or getattr(acc, "set_device_idx", None)
    if setter is None:
        torch.cuda.set_device(device)
    else:
        setter(device)


def synchronize(torch: Any, device: Any = None) -> None:
    """Wait for all work on `device` (the current one by default): torch.accelerator.synchronize (2.6+)."""
    acc = getattr(torch, "accelerator", None)
    (acc.synchronize if acc is not None else torch.cuda.synchronize)(device)


def timing_event(torch: Any, device: str) -> Any:
    """A timing event on `device`: `torch.Event(device, enable_timing=True)`, or torch.cuda.Event without it."""
    if hasattr(torch, "Event") and hasattr(torch, "accelerator"):
        return torch.Event(device=torch.device(device), enable_timing=True)
    return torch.cuda.Event(enable_timing=True)


def _memory_call(torch: Any, name: str, device: Any) -> Any:
    """torch.accelerator.<name> (2.8+), else the device module's (torch.cuda.<name>, torch.xpu.<name>)."""
    call = getattr(getattr(torch, "accelerator", None), name, None)
    if call is None:
        dtype = getattr(device, "type", None) or str(device).split(":")[0]
        call = getattr(torch.get_device_module(dtype) if hasattr(torch, "get_device_module") else torch.cuda, name,
                       None)
    return None if call is None else call(device)


def memory_allocated(torch: Any, device: Any) -> int | None:
    value = _memory_call(torch, "memory_allocated", device)
    return None if value is None else int(value)


def max_memory_allocated(torch: Any, device: Any) -> int | None:
    """The allocator's high-water mark on `device` since the last reset; None where torch has no such call."""
    value = _memory_call(torch, "max_memory_allocated", device)
    return None if value is None else int(value)


def reset_peak_memory_stats(torch: Any, device: Any) -> None:
    _memory_call(torch, "reset_peak_memory_stats", device)


def empty_cache(torch: Any) -> None:
    acc = getattr(torch, "accelerator", None)
    call = getattr(acc, "empty_cache", None) or torch.cuda.empty_cache
    call()


def on_accelerator(device: str) -> bool:
    """Whether a torch device string names an accelerator ("cuda:0", "xpu:1", "neuron:0"), not the host."""
    return not (device == "cpu" or device.startswith("cpu:"))


def wait_for(torch: Any, device: str, out: Any = None) -> None:
    """Block until `device` has finished the work so far, by the device's sync rule (machine/sync.py): a read-back
    of one element of `out` where the device's own sync is not trusted (Trainium, Gaudi), else synchronize.
    Nothing on the host. Used for one-off times (a first call's compile time), not for the timers."""
    from xmfu.harness.machine.sync import READ_BACK, TORCH_RULES

    if not on_accelerator(device):
        return
    device_type = device.split(":")[0]
    if device_type == "cuda":
        torch.cuda.synchronize(device)
        return
    rule = TORCH_RULES.get(DEVICE_KINDS.get(device_type, (device_type,))[0])
    if rule is not None and rule.method == READ_BACK and out is not None and hasattr(out, "reshape"):
        out.reshape(-1)[0].item()
        return
    synchronize(torch, device)
