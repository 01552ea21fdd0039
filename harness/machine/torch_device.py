"""torch's device-generic runtime calls, in one place: which accelerator torch drives, how many, which is current,
synchronize, events and allocator statistics, through `torch.accelerator` where the installed torch has the call
and through `torch.cuda` where it does not.

What each torch release offers (xmfu supports torch 2.6 to 2.13, machine/compat.py):
- torch 2.6.0, read in its wheel (torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl from PyPI: torch/accelerator/
  __init__.py, torch/_C/__init__.pyi): `torch.accelerator` has `device_count()`, `is_available()`
  (device_count() > 0), `current_accelerator()` with no argument (it raises where there is no accelerator),
  `current_device_index()`, `set_device_index(device)` (the `_idx` names are already deprecated aliases there),
  `current_stream(device)`, `set_stream(stream)`, `synchronize(device=None)`; no allocator statistics.
- torch 2.7 gave `current_accelerator(check_available=False)` its argument (docs 2.7 accelerator.rst).
- torch 2.8 added the allocator statistics `torch.accelerator.memory_allocated`, `max_memory_allocated`,
  `reset_peak_memory_stats`, `empty_cache`... (torch/accelerator/memory.py; docs 2.8 accelerator.md); before it
  they are per device module (`torch.cuda.max_memory_allocated`, `torch.xpu.max_memory_allocated`).
- `torch.Event` is in torch 2.6.0: torch/_C/__init__.pyi "class Event" ("Defined in torch/csrc/Event.cpp") with
  `__new__(device=None, *, enable_timing=False, blocking=False, interprocess=False)`, `record`, `wait`, `query`,
  `elapsed_time`, `synchronize`, exported as torch.Event by torch/__init__.py's `from torch._C import *`; 2.13 has
  the same (elapsed_time in milliseconds, torch/_torch_docs.py). xmfu always passes the device and
  enable_timing=True. `timing_event` still checks for it, for a vendor build that leaves it out.
- CUDA and ROCm builds keep `torch.cuda`: where xmfu called `torch.cuda.X(device)` before, a "cuda" device still
  calls exactly that (the calls its CUDA numbers were taken with, present in every supported torch). On torch 2.13
  `torch.accelerator.max_memory_allocated` would read the same allocator statistic
  (torch/accelerator/memory.py: memory_stats(...)["allocated_bytes.all.peak"], as torch/cuda/memory.py does).
- Before 2.8, another accelerator's allocator calls are its device module's, `getattr(torch, device_type)`
  (torch.xpu.max_memory_allocated; a vendor backend registers its module as torch.<type>, the lookup
  torch.get_device_module does in torch 2.13 torch/__init__.py); where neither has the call the figure is None,
  "not measured".
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


def set_device(torch: Any, device: str | int) -> None:
    """Make `device` ("cuda:N", "xpu:N"..., or an index of the accelerator torch drives) torch's current device:
    events, synchronize() and graph capture act on the current device. `set_device_index` (2.6+; a torch.device,
    str or int: torch/accelerator/__init__.py), its deprecated alias `set_device_idx` as a fallback, older
    `torch.cuda.set_device`."""
    acc = getattr(torch, "accelerator", None)
    setter = getattr(acc, "set_device_index", None) or getattr(acc, "set_device_idx", None)
    if setter is None or (isinstance(device, str) and device.startswith("cuda")):
        torch.cuda.set_device(device)  # CUDA/ROCm: the call xmfu always made there
    else:
        setter(device)


def device_type_of(device: Any) -> str:
    """"xpu" of "xpu:1", a torch.device or anything with `.type`."""
    return getattr(device, "type", None) or str(device).split(":")[0]


def current_device(torch: Any, device_type: str) -> str:
    """torch's current device of `device_type` as a device string, "cuda:N" (torch.cuda.current_device(), as xmfu
    always asked on CUDA/ROCm), "xpu:N"... (torch.accelerator.current_device_index, 2.6+; its deprecated alias
    current_device_idx as a fallback)."""
    if device_type == "cuda":
        return f"cuda:{torch.cuda.current_device()}"
    acc = getattr(torch, "accelerator", None)
    getter = getattr(acc, "current_device_index", None) or getattr(acc, "current_device_idx", None)
    if getter is None:  # torch before 2.6: the device module's own call (torch.xpu.current_device())
        getter = getattr(torch, device_type).current_device
    return f"{device_type}:{int(getter())}"


def synchronize(torch: Any, device: Any = None) -> None:
    """Wait for all work on `device` (the current one by default): torch.accelerator.synchronize (2.6+)."""
    acc = getattr(torch, "accelerator", None)
    (acc.synchronize if acc is not None else torch.cuda.synchronize)(device)


def synchronize_device(torch: Any, device: str) -> None:
    """Wait for all work on the torch device string `device`; nothing for the host. "cuda:N" calls
    torch.cuda.synchronize(device) as before; another accelerator torch.accelerator.synchronize(device). Not a
    proven end of work on every device (machine/sync.py: Trainium's is reported to return early): for one-off
    waits whose time is not reported (a profiler trace's end); times use `wait_for` or the timers."""
    if not on_accelerator(device):
        return
    if device_type_of(device) == "cuda":
        torch.cuda.synchronize(device)
    else:
        synchronize(torch, device)


def timing_event(torch: Any, device: str) -> Any:
    """A timing event on `device`: `torch.Event(device, enable_timing=True)`, or torch.cuda.Event without it."""
    if hasattr(torch, "Event") and hasattr(torch, "accelerator"):
        return torch.Event(device=torch.device(device), enable_timing=True)
    return torch.cuda.Event(enable_timing=True)


def _memory_call(torch: Any, name: str, device: Any) -> Any:
    """The allocator call `name` for `device`: torch.cuda.<name> on a CUDA/ROCm device (see the module docstring);
    else torch.accelerator.<name> (2.8+), else the device module's (torch.xpu.<name>); None where none has it."""
    dtype = device_type_of(device)
    call = None
    if dtype != "cuda":
        call = getattr(getattr(torch, "accelerator", None), name, None)
    if call is None:
        call = getattr(getattr(torch, dtype, None), name, None)
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


def empty_cache(torch: Any, device: Any) -> None:
    """Hand the allocator's cached blocks on `device`'s accelerator back: torch.cuda.empty_cache() on CUDA/ROCm,
    torch.accelerator.empty_cache() (2.8+; it does nothing before the allocator is initialised,
    torch/accelerator/memory.py), else the device module's (torch.xpu.empty_cache); nothing on the host or where
    torch has no such call. Takes no device: every one of these empties the caches of the whole device type."""
    dtype = device_type_of(device)
    if dtype == "cpu":
        return
    call = getattr(getattr(torch, "accelerator", None), "empty_cache", None) if dtype != "cuda" else None
    call = call or getattr(getattr(torch, dtype, None), "empty_cache", None)
    if call is not None:
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
