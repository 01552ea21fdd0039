"""Step-0 parity of a distributed JAX step (dp or fsdp) with the single-device step on the same global batch:
the check batch is one sequence per device, at most CHECK_TOKENS tokens.

Every process runs the single-device step on its own first local device (or on the host's CPU device when
the model and its optimizer state do not fit one accelerator) and compares its own shards of the distributed
parameters after one optimizer step; the squared errors are summed over processes.
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


def single_device_reference(run: TrainSpec, step: Callable, tx: Any) -> dict[str, Any]:
    """`step(params, opt_state, x, y) -> (params, opt_state, (loss, grad_norm))` on one device."""
    import jax

    device = local_jax_device()
    try:
        return {**_single_device_step(run, device, step, tx), "device": str(device)}
    except Exception as exc:  # XLA reports running out of device memory as RESOURCE_EXHAUSTED
        if "RESOURCE_EXHAUSTED" not in str(exc) or device.platform == "cpu":
            raise
    host = jax.local_devices(backend="cpu")[0]  # jax.devices("cpu") lists every process's CPU devices
    return {**_single_device_step(run, host, step, tx), "device": "cpu (does not fit one device)"}


def _squared_errors(params: dict[str, Any], ref: dict[str, Any]) -> float:
    """Sum of (distributed - reference)^2 over the shards this process holds (each element once)."""
    total = 0.0
    for name, array in params.items():
        for shard in array.addressable_shards:
            if shard.replica_id == 0:
                got = np.asarray(shard.data, dtype=np.float32)
                total += float(np.sum((got - ref["params"][name][shard.index]) ** 2, dtype=np.float64))
    return total


def compare(run: TrainSpec, loss: float, grad_norm: float, params: dict[str, Any], ref: dict[str, Any],
            n: int) -> dict[str, Any]:
    """The parity numbers every process reports the same: errors summed over processes."""
    import jax

    diff = _squared_errors(params, ref)
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        diff = float(np.sum(multihost_utils.process_allgather(np.array([diff]))))
    initial = run.weights()
    update = sum(float(np.sum((ref["params"][k] - initial[k]) ** 2, dtype=np.float64)) for k in initial)
    rows = run.check_rows()
    return {"loss": loss, "grad_norm": grad_norm, "ref_loss": ref["loss"], "ref_grad_norm": ref["grad_norm"],
            "update_error": math.sqrt(diff) / math.sqrt(update) if update else math.sqrt(diff),
            "reference_device": ref["device"], "sequences": rows["batch"], "tokens": rows["tokens"], "devices": n}
