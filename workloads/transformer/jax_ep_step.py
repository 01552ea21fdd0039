"""The expert-parallel JAX step (jax_ep.py) over every device of the run: its parity with the single-device step,
its timed step, the variants timed with it and what its row records (the routing, the bytes the exchanges moved).

Variants, as jax_parallel.py's: `no_comm`, the same per-device step under shard_map with every exchange the
identity and no collective (each device runs its local experts on its own assignments: the same buffer shapes,
so the same work on a CPU; on an accelerator a ragged GEMM's time follows its group sizes, which differ), and
`comm_alone`, the collectives the compiled step contains, timed alone (jax_comm.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from xmfu.harness.engine.case import FixedPlan, Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.workloads.collectives.jax import shard_map_api
from xmfu.workloads.transformer import jax_comm, jax_ep, jax_parity, parallel
from xmfu.workloads.transformer.jax_moe import EXPERT_GEMM
from xmfu.workloads.transformer.jax_parallel import (
    PEAK_MEMORY_SOURCE,
    _gather,
    _global,
    _peak_memory,
    _pinned,
    check_step,
    processes_on_cpu_problem,
    step_memory,
)
from xmfu.workloads.transformer.routing import RoutingLog
from xmfu.workloads.transformer.spec import ADAMW, TrainSpec

AXIS = jax_ep.AXIS


def _state(run: TrainSpec, mesh: Any, tx: Any) -> dict[str, Any]:
    """Parameters and AdamW state on the mesh: each routed expert's weights (and moments) split on dim 0, the rest
    replicated."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    specs = jax_ep.param_specs(run.model.weight_shapes())
    params = {k: _global(w, NamedSharding(mesh, specs[k])) for k, w in run.weights().items()}

    def sharding(path: tuple, leaf: Any) -> Any:  # optax's moments are dicts keyed by the parameter's name
        named = [getattr(key, "key", None) for key in path]
        split = any(isinstance(k, str) and jax_ep.is_expert(k) for k in named)
        return NamedSharding(mesh, P(AXIS) if split else P())

    out = jax.tree_util.tree_map_with_path(sharding, jax.eval_shape(tx.init, params))
    return {"params": params, "opt": jax.jit(tx.init, out_shardings=out)(params)}


def _train_step(lossf: Callable, tx: Any, n: int) -> Callable:
    def step(params, opt_state, x, y):
        import jax
        import optax

        (loss, counts), grads = jax.value_and_grad(lossf, has_aux=True)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, (loss, jax_ep.imbalance(counts, n), counts)

    return step


def _no_comm(run: TrainSpec, mesh: Any, tx: Any, state: dict[str, Any], batch: tuple) -> Any:
    """The per-device step with no collective, compiled: shard_map with its replication check off (the devices'
    results differ), every exchange the identity (jax_ep.Exchange(collective=False))."""
    import jax
    import optax
    from jax.sharding import PartitionSpec as P

    name, shard_map = shard_map_api(jax)
    unchecked = {"check_vma": False} if name == "jax.shard_map" else {"check_rep": False}
    lossf = jax_ep.local_loss(run, jax_ep.Exchange(run.devices, collective=False))
    pspecs = {k: v.sharding.spec for k, v in state["params"].items()}
    ospecs = jax.tree.map(lambda a: a.sharding.spec, state["opt"])

    def local(params, opt, x, y):
        (loss, _), grads = jax.value_and_grad(lossf, has_aux=True)(params, x, y)
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, loss

    mapped = shard_map(local, mesh=mesh, in_specs=(pspecs, ospecs, P(AXIS), P(AXIS)),
                       out_specs=(pspecs, ospecs, P()), **unchecked)
    return jax.jit(mapped, donate_argnums=(0, 1)).lower(state["params"], state["opt"], *batch).compile()


def _local_copy(array: Any) -> np.ndarray:
    """A replicated array's value from this process's first copy (every process holds one; np.asarray would need
    every device's)."""
    return np.asarray(array.addressable_data(0))


def _payload(run: TrainSpec, counts: np.ndarray) -> dict[str, Any]:
    """What the first step's routing needed to send (parallel.py's formula, as torch's ep row counts it), per
    device and their mean: counts (n·MoE blocks, E), every device's tokens per expert."""
    n, m = run.devices, run.model
    per = np.asarray(counts).reshape(n, -1, m.n_experts)
    row_bytes = m.d_model * (2 if run.dtype == "bf16" else 4)
    replicated = sum(int(np.prod(s)) for k, s in m.weight_shapes().items() if not jax_ep.is_expert(k))
    devices = []
    for r in range(n):
        exchanged = 0.0
        for block in range(per.shape[1]):
            split = per[:, block].reshape(n, n, -1).sum(-1)  # [s, d]: assignments device s sends device d
            exchanged += parallel.ep_exchange_bytes(split[r].tolist(), split[:, r].tolist(), r, row_bytes)
        devices.append(parallel.ep_bytes_per_rank(exchanged, replicated, n))
    return {"bytes_per_rank": float(np.mean(devices)), "per_device": devices,
            "formula": "the mean over devices of " + parallel.EP_FORMULA}


def _notes(run: TrainSpec, compiled: Any, no_comm: Any, found: list[Any], devices: list[Any]) -> dict[str, Any]:
    """What the row records of the compiled step: the split, the exchange, the collectives XLA put in the step and
    its twin, who sat where and XLA's memory figure."""
    import jax

    n, m = run.devices, run.model
    return {"strategy": "ep", "world_size": n, "processes": jax.process_count(), "experts_per_rank": m.n_experts // n,
            "expert_gemm": EXPERT_GEMM, "exchange": jax_ep.EXCHANGE,
            "exchange_rows_per_destination": run.per_device_batch * m.seq_len * m.top_k,
            "hlo_collectives": {**jax_comm.summary(found), "bytes_per_rank": parallel.bytes_per_rank(found, n)},
            "no_comm_hlo_collectives": jax_comm.summary(jax_comm.hlo_collectives(no_comm.as_text(), n)),
            "comm_alone_collectives": {"source": "the compiled step's HLO",
                                       "collectives": [c.as_dict() for c in found]},
            "rank_map": [{"device": str(d), "id": d.id, "process": d.process_index} for d in devices],
            "step_memory": step_memory(compiled)}


def prepare_ep(case: TrainSpec, ctx: RunContext, notes: dict[str, Any]) -> Prepared:
    import jax
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from xmfu.workloads.transformer.jax_model import loss_fn

    devices = jax.devices()  # every process's devices: the mesh spans them all
    run = case.on_devices(len(devices))
    why = (parallel.ep_problem(run.model, run.devices) or run.split_problem()
           or processes_on_cpu_problem(jax.__version__, jax.process_count(), devices[0].platform))
    if why:
        raise Unavailable(why)
    mesh, n = Mesh(np.array(devices), (AXIS,)), run.devices
    precision = "highest" if run.dtype == "fp32" else "default"  # as the single-device JAX backend
    tx = optax.adamw(run.lr, **ADAMW)
    lossf = jax_ep.mapped_loss(run, mesh, shard_map_api(jax)[1])
    plain = partial(loss_fn, run.model, dtype=jax.numpy.bfloat16 if run.dtype == "bf16" else jax.numpy.float32,
                    checkpointing=run.activation_checkpointing)
    batch_sharding = NamedSharding(mesh, P(AXIS))
    with jax.default_matmul_precision(precision):
        # process 0's single-device step first, while its device holds no distributed state (as torch_parity.py)
        ref = jax_parity.single_device_reference(run, check_step(plain, tx), tx)
        state = _state(run, mesh, tx)
        x, y = (_global(a, batch_sharding) for a in jax_parity.check_batch(run))
        state["params"], state["opt"], (loss, grad_norm) = _pinned(
            check_step(lambda p, a, b: lossf(p, a, b)[0], tx), state, mesh)(state["params"], state["opt"], x, y)
        check = jax_parity.compare(run, float(loss), float(grad_norm), state["params"], ref, n)
        del ref
        batch = tuple(_global(a, batch_sharding) for a in run.batch_tokens())
        start = time.perf_counter()
        compiled = _pinned(_train_step(lossf, tx, n), state, mesh).lower(state["params"], state["opt"],
                                                                         *batch).compile()
        compile_s = time.perf_counter() - start
        no_comm = _no_comm(run, mesh, tx, state, batch)
    routing = RoutingLog(run.model, EXPERT_GEMM, _local_copy)
    first: list[Any] = []

    def step() -> Any:
        state["params"], state["opt"], (loss, per_block, counts) = compiled(state["params"], state["opt"], *batch)
        routing.add(per_block)
        if not first:
            first.append(counts)
        return loss

    def step_no_comm() -> Any:
        state["params"], state["opt"], loss = no_comm(state["params"], state["opt"], *batch)
        return loss

    found = jax_comm.hlo_collectives(compiled.as_text(), n)
    notes = {**notes, "compile_s": compile_s, "matmul_precision": precision,
             "reference_device": check["reference_device"], **_notes(run, compiled, no_comm, found, devices)}
    prepared = Prepared(step, lambda select: check, "jax", notes=notes, peak_memory=_peak_memory(notes),
                        peak_memory_source=PEAK_MEMORY_SOURCE, case=run, fixed=FixedPlan(run.warmup, run.samples, 1),
                        gather=_gather(notes), rank_combine="max", recorded=routing.figures,
                        variants={"no_comm": step_no_comm, "comm_alone": jax_comm.collectives_alone(found, devices)})
    step()  # the first step: its routing gives the payload figure
    notes["comm"] = {"bytes_per_rank": parallel.bytes_per_rank(found, n), "formula": parallel.COMPILED_FORMULA,
                     "collectives_per_step": len(found), "textbook": _payload(run, _local_copy(first[0]))}
    return prepared
