"""Step-0 parity of a distributed JAX step (dp or fsdp) with the single-device step on the same global batch:
the check batch is one sequence per device, at most CHECK_TOKENS tokens.

Process 0 alone runs the single-device step, on its first local device (or on its host's CPU device when the
model and its optimizer state do not fit one accelerator), before the distributed state is built; the other
processes compute nothing. Were every process to run it, a one-process-per-GPU node would hold one fp32 model
with its gradients and AdamW state per process in host memory at once when the step falls back to the host (as
torch_parity.py, rank 0 computes and shares). Process 0 then broadcasts its numbers, one parameter at a time
(multihost_utils.broadcast_one_to_all), and every process compares its own shards of the distributed parameters
after one optimizer step; the squared errors are summed over processes, so every process reports the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from xmfu.harness.machine.frameworks import local_jax_device
from xmfu.workloads.transformer.spec import TrainSpec


def check_batch(run: TrainSpec) -> tuple[np.ndarray, np.ndarray]:
    rows = run.check_rows()
    inputs, targets = run.batch_tokens()
    return inputs[: rows["batch"], : rows["tokens"]], targets[: rows["batch"], : rows["tokens"]]


def _single_device_step(run: TrainSpec, device: Any, step: Callable, tx: Any) -> dict[str, Any]:
    import jax

    params = {n: jax.device_put(w, device) for n, w in run.weights().items()}
    x, y = (jax.device_put(a, device) for a in check_batch(run))
    new, _, (loss, grad_norm) = jax.jit(step)(params, tx.init(params), x, y)
    return {"loss": float(loss), "grad_norm": float(grad_norm),
            "params": {n: np.asarray(v, dtype=np.float32) for n, v in new.items()}}


def single_device_reference(run: TrainSpec, step: Callable, tx: Any) -> dict[str, Any] | None:
    """`step(params, opt_state, x, y) -> (params, opt_state, (loss, grad_norm))` on one device of process 0;
    None on every other process (compare() hands them process 0's numbers)."""
    import jax

    if jax.process_index() != 0:
        return None
    device = local_jax_device()
    try:
        return {**_single_device_step(run, device, step, tx), "device": device_name(device)}
    except Exception as exc:  # XLA reports running out of device memory as RESOURCE_EXHAUSTED
        if "RESOURCE_EXHAUSTED" not in str(exc) or device.platform == "cpu":
            raise
    host = jax.local_devices(backend="cpu")[0]  # jax.devices("cpu") lists every process's CPU devices
    return {**_single_device_step(run, host, step, tx), "device": HOST_REFERENCE}


HOST_REFERENCE = "cpu (does not fit one device)"


def device_name(device: Any) -> str:
    """`cpu:0`, `cuda:0`: the device as jax 0.5 and later print it; jax 0.4 prints its client's name (TFRT_CPU_0)."""
    text = str(device)
    return text if ":" in text else f"{device.platform}:{device.id}"


def _from_process_zero(value: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """Process 0's float32 `value` on every process (`shape`: its shape, where this process has no value).
    broadcast_one_to_all (jax/experimental/multihost_utils.py, jax 0.10.2) psums the source's array with the
    others' zeros; with one process it returns the array itself."""
    from jax.experimental import multihost_utils

    mine = value if value is not None else np.zeros(shape, np.float32)
    return np.asarray(multihost_utils.broadcast_one_to_all(mine, is_source=value is not None))


def _shared_scalars(ref: dict[str, Any] | None) -> dict[str, Any]:
    """Process 0's loss, gradient norm and where it ran. float32 carries them exactly (float32 results), and a
    broadcast array keeps its dtype only as far as JAX's x64 setting allows."""
    import jax

    mine = None if ref is None else np.array([ref["loss"], ref["grad_norm"], ref["device"] == HOST_REFERENCE],
                                             np.float32)
    loss, grad_norm, on_host = _from_process_zero(mine, (3,)).tolist()
    first = next(d for d in jax.devices() if d.process_index == 0)  # process 0's first device: local_jax_device()
    device = ref["device"] if ref is not None else (HOST_REFERENCE if on_host else device_name(first))
    return {"loss": loss if ref is None else ref["loss"], "grad_norm": grad_norm if ref is None else ref["grad_norm"],
            "device": device}


def _squared_error(array: Any, want: np.ndarray) -> float:
    """Sum of (distributed - reference)^2 over the shards of `array` this process holds (each element once)."""
    total = 0.0
    for shard in array.addressable_shards:
        if shard.replica_id == 0:
            got = np.asarray(shard.data, dtype=np.float32)
            total += float(np.sum((got - want[shard.index]) ** 2, dtype=np.float64))
    return total


def compare(run: TrainSpec, loss: float, grad_norm: float, params: dict[str, Any], ref: dict[str, Any] | None,
            n: int) -> dict[str, Any]:
    """The parity numbers every process reports the same: `ref` is process 0's (None elsewhere), shared one
    parameter at a time, so no process holds a second whole model; errors summed over processes."""
    import jax

    scalars = _shared_scalars(ref)
    diff = update = 0.0
    for name, initial in run.weights().items():  # the same order on every process: each broadcast pairs up
        want = _from_process_zero(None if ref is None else ref["params"][name], initial.shape)
        diff += _squared_error(params[name], want)
        update += float(np.sum((want - initial) ** 2, dtype=np.float64))
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        diff = float(np.sum(multihost_utils.process_allgather(np.array([diff]))))
    rows = run.check_rows()
    return {"loss": loss, "grad_norm": grad_norm, "ref_loss": scalars["loss"], "ref_grad_norm": scalars["grad_norm"],
            "update_error": math.sqrt(diff) / math.sqrt(update) if update else math.sqrt(diff),
            "reference_device": scalars["device"], "sequences": rows["batch"], "tokens": rows["tokens"],
            "devices": n}
