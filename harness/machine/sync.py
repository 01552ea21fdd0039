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
    # Gaudi: Habana's own synchronize/event semantics were not checked against its documentation here, so xmfu
    # relies on the data dependence alone.
    "hpu": SyncRule(READ_BACK, "one element of the last call's output copied to the host (a copy cannot finish "
                               "before the work producing it); Gaudi's own synchronize and events are not yet "
                               "verified against Habana's documentation; the time includes that one-element copy"),
    "tpu": SyncRule(None, "TorchTPU's documentation on when device work is complete could not be checked: no sync "
                          "is proven for torch on a TPU, so its rows are checked but not timed", proven=False),
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
