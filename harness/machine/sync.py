"""How a timer knows the device finished, per framework and device: the rule each row records as `sync`.

A time is only as good as its sync: a call that returns before the device is done makes the work look faster
than it ran. Each rule says what establishes completion and why that is trusted; where nothing is proven the rule
says so (`proven` False) and the engine checks the backend but does not time it (timing_valid false).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CUDA_EVENT = "cuda event"
DEVICE_EVENT = "torch.Event"
READ_BACK = "read-back of one element"
BLOCK = "jax.block_until_ready"
HOST = "none needed: synchronous host work"


@dataclass(frozen=True)
class SyncRule:
    method: str | None  # one of the names above; None where no method is proven
    reason: str
    proven: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.method, "reason": self.reason}


# torch on each accelerator. The reasons cite where the rule comes from.
TORCH_RULES = {
    "cuda": SyncRule(CUDA_EVENT, "CUDA events recorded on the current stream; Event.synchronize() waits until the "
                                 "device has run everything before the end event (torch.cuda.Event, torch/cuda/"
                                 "streams.py)"),
    "rocm": SyncRule(CUDA_EVENT, "HIP events through torch.cuda.Event on the current stream, as on CUDA "
                                 "(torch/cuda/streams.py; hipEventSynchronize)"),
    "xpu": SyncRule(DEVICE_EVENT, "torch.Event on the XPU's current stream; its synchronize() 'waits until the "
                                  "completion of all work currently captured in this event' (torch.xpu.Event "
                                  "documentation, torch 2.13)"),
    # Issue 29, citing SemiAnalysis' OperatorX Trainium runner: torch-xla's sync calls and wait_device_ops return
    # before the device finishes, and the runner reads one element back instead. A host copy of the last output
    # cannot finish before the work that produces it; calls on one device run in order, so it waits for all of them.
    "neuron": SyncRule(READ_BACK, "one element of the last call's output copied to the host: torch-xla/TorchNeuron "
                                  "sync calls and wait_device_ops are reported to return before the device finishes "
                                  "(SemiAnalysis' OperatorX Trainium runner reads one element back instead); the "
                                  "time includes that one-element copy"),
    # Gaudi, checked against Habana's documentation (docs.habana.ai, read 2026-11-26): lazy mode is the default
    # ("PyTorch Gaudi Theory of Operations": ops accumulate into a graph that runs when flushed), and
    # mark_step(sync=True) "does not synchronize device-side execution (i.e., it is not equivalent to
    # torch.hpu.synchronize())" (Reference, mark_step). DeepSpeed's HPU accelerator (accelerator/hpu_accelerator.py,
    # PR #5026) says HPU execution is asynchronous to the host but tensor data read in script order is valid. A host
    # copy of the last output therefore flushes the pending graph and waits for the device to produce it.
    "hpu": SyncRule(READ_BACK, "one element of the last call's output copied to the host: in Gaudi's default lazy "
                               "mode the copy flushes the accumulated graph and waits for its result (Habana "
                               "docs: mark_step(sync=True) waits for the host side only, not the device); the "
                               "time includes that one-element copy"),
    # TorchTPU's one public description (Google Developers Blog, "TorchTPU: Running PyTorch Natively on TPUs at
    # Google Scale", read 2026-11-26) names its modes (Debug Eager synchronous; Strict Eager asynchronous like
    # standard PyTorch; Fused Eager) and puts the public release on its 2026 roadmap; it names no completion call.
    "tpu": SyncRule(None, "TorchTPU publishes no documentation of when device work is complete (its only public "
                          "description, Google's announcement, says Strict and Fused Eager run asynchronously and "
                          "names no completion call): no sync is proven for torch on a TPU, so its rows are "
                          "checked but not timed", proven=False),
    "cpu": SyncRule(HOST, "torch on the host returns when the work is done; perf_counter around the calls"),
}
JAX_RULE = SyncRule(BLOCK, "jax.block_until_ready on the last output; calls on one device run in order, so it "
                           "waits for all of them (jax dispatch is asynchronous on every backend)")
HOST_RULE = SyncRule(HOST, "host work (numpy, Triton's interpreter) is synchronous; perf_counter around the calls")


def sync_rule(framework: str, platform_kind: str) -> SyncRule:
    """The rule for a backend's framework ("torch", "jax", "host") on a platform kind."""
    if framework == "jax":
        return JAX_RULE
    if framework != "torch":
        return HOST_RULE
    return TORCH_RULES.get(platform_kind, SyncRule(None, f"no sync rule is known for torch on a {platform_kind} "
                                                         "device: checked but not timed", proven=False))
