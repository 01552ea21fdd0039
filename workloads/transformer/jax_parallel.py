"""The training step over every JAX device of the run: a 1-D mesh (axis "data") over jax.devices(), which spans
every process after jax.distributed (torchrun, Slurm, or JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
JAX_PROCESS_ID), or one process's several devices (a TPU host, several GPUs, forced host devices on a CPU:
XLA_FLAGS=--xla_force_host_platform_device_count=N).

- `dp`: the batch sharded over "data", parameters and optimizer state replicated; XLA all-reduces the gradients.
- `fsdp`: parameters and optimizer state sharded on dim 0 over "data" with NamedSharding (a parameter whose dim 0
  does not divide stays replicated), gathered where each group is used by a sharding constraint to replicated;
  XLA inserts the all-gathers and the gradients' reduce-scatters (or all-reduces).

Variants timed with the step: `no_comm`, the same per-device work under shard_map with no collective (each device
its local batch on whole parameters; fsdp updates this device's shard), and `comm_alone`, the collectives the
compiled step contains, timed alone (jax_comm.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from xmfu.harness.engine.case import FixedPlan, Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import JAX_PEAK_SOURCE
from xmfu.workloads.collectives.jax import shard_map_api
from xmfu.workloads.transformer import jax_comm, jax_parity, parallel
from xmfu.workloads.transformer.spec import ADAMW, TrainSpec

AXIS = "data"


def unavailable(case: TrainSpec) -> str | None:
    if case.parallel == "ep":
        return parallel.ep_problem(case.model, 1)  # the experts' split over the devices is checked once they are known
    if case.distributed and case.model.moe:
        return parallel.MOE_NOT_DISTRIBUTED
    if case.distributed and case.parallel not in parallel.STRATEGIES["jax"]:
        return (f"{case.parallel} is torch's strategy; the JAX backend runs "
                f"{' or '.join(parallel.STRATEGIES['jax'])}")
    return None


def _spec(run: TrainSpec, shape: tuple[int, ...]) -> Any:
    from jax.sharding import PartitionSpec as P

    if run.parallel == "fsdp" and shape and shape[0] % run.devices == 0:
        return P(AXIS)
    return P()


def _global(host: np.ndarray, sharding: Any) -> Any:
    import jax

    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _train_step(lossf: Callable, tx: Any) -> Callable:
    def train_step(params, opt_state, x, y):
        import jax
        import optax

        loss, grads = jax.value_and_grad(lossf)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def check_step(lossf: Callable, tx: Any) -> Callable:
    """One step that also returns the gradient norm: the parity check's numbers in one compiled program."""
    def step(params, opt_state, x, y):
        import jax
        import optax

        from xmfu.workloads.transformer.jax_model import global_norm

        loss, grads = jax.value_and_grad(lossf)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, (loss, global_norm(grads))

    return step


def _no_comm(run: TrainSpec, mesh: Any, lossf: Callable, tx: Any, state: dict[str, Any], batch: tuple) -> Any:
    """The per-device step with no collective, compiled: shard_map with its replication check off (the devices'
    results differ, as DDP's under no_sync)."""
    import jax
    import optax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    name, shard_map = shard_map_api(jax)
    unchecked = {"check_vma": False} if name == "jax.shard_map" else {"check_rep": False}
    pspecs = {k: v.sharding.spec for k, v in state["params"].items()}
    ospecs = jax.tree.map(lambda a: a.sharding.spec, state["opt"])
    sharded = {k: s != P() for k, s in pspecs.items()}

    def local(params, opt, x, y, *whole):
        loss, grads = jax.value_and_grad(lossf)(whole[0] if whole else params, x, y)
        if whole:  # fsdp: this device's rows of each sharded gradient
            start = jax.lax.axis_index(AXIS)
            grads = {k: jax.lax.dynamic_slice_in_dim(g, start * params[k].shape[0], params[k].shape[0], 0)
                     if sharded[k] else g for k, g in grads.items()}
        updates, opt = tx.update(grads, opt, params)
        return optax.apply_updates(params, updates), opt, loss

    extra: tuple = ()
    if run.parallel == "fsdp":  # whole parameters on every device: what the all-gathers would deliver
        replicated = NamedSharding(mesh, P())
        extra = ({k: _global(w, replicated) for k, w in run.weights().items()},)
    specs = (pspecs, ospecs, P(AXIS), P(AXIS), *(dict.fromkeys(pspecs, P()) for _ in extra))
    mapped = shard_map(local, mesh=mesh, in_specs=specs, out_specs=(pspecs, ospecs, P()), **unchecked)
    compiled = jax.jit(mapped, donate_argnums=(0, 1)).lower(state["params"], state["opt"], *batch, *extra).compile()
    return compiled, extra


def _state(run: TrainSpec, mesh: Any, tx: Any) -> dict[str, Any]:
    import jax
    from jax.sharding import NamedSharding

    params = {k: _global(w, NamedSharding(mesh, _spec(run, w.shape))) for k, w in run.weights().items()}
    abstract = jax.eval_shape(tx.init, params)
    out = jax.tree.map(lambda a: NamedSharding(mesh, _spec(run, a.shape)), abstract)
    return {"params": params, "opt": jax.jit(tx.init, out_shardings=out)(params)}


def _pinned(step: Callable, state: dict[str, Any], mesh: Any) -> Any:
    """`step` jitted with its shardings pinned (the state keeps its layout step after step), buffers donated."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    params = {k: v.sharding for k, v in state["params"].items()}
    opt = jax.tree.map(lambda a: a.sharding, state["opt"])
    batch = NamedSharding(mesh, P(AXIS))
    return jax.jit(step, in_shardings=(params, opt, batch, batch),
                   out_shardings=(params, opt, NamedSharding(mesh, P())), donate_argnums=(0, 1))


def _losses(run: TrainSpec, mesh: Any) -> tuple[Callable, Callable]:
    """(the distributed loss, the single-device loss): the same model; fsdp gathers each group where used."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from xmfu.workloads.transformer.jax_model import loss_fn

    dtype = jnp.bfloat16 if run.dtype == "bf16" else jnp.float32
    plain = partial(loss_fn, run.model, dtype=dtype, checkpointing=run.activation_checkpointing)
    if run.parallel != "fsdp":
        return plain, plain
    replicated = NamedSharding(mesh, P())

    def gather(group):
        return {k: jax.lax.with_sharding_constraint(v, replicated) for k, v in group.items()}

    return partial(plain, gather=gather), plain


def _check(run: TrainSpec, mesh: Any, lossf: Callable, tx: Any, state: dict, ref: dict | None) -> dict:
    """The parity numbers against `ref` (process 0's single-device step, None on the other processes); the state
    takes the distributed step's first update."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    x, y = (_global(a, NamedSharding(mesh, P(AXIS))) for a in jax_parity.check_batch(run))
    state["params"], state["opt"], (loss, grad_norm) = _pinned(check_step(lossf, tx), state, mesh)(
        state["params"], state["opt"], x, y)
    return jax_parity.compare(run, float(loss), float(grad_norm), state["params"], ref, run.devices)


def processes_on_cpu_problem(version: str, processes: int, platform: str) -> str | None:
    """Why the distributed step refuses several CPU processes on jax 0.4, or None. Seen with jax 0.4.38 (the floor,
    scripts/compat.sh floor) in tests/workloads/test_jax_processes.py: process 0's initial weights (numpy arrays)
    changed during the donated distributed step, a few tensors each run, and one run in three ended with a gloo
    all-reduce's `Connection reset by peer` and the process aborted (gloo::EnforceNotMet); jax 0.10 and 0.11 agree
    exactly, every run. Not measured on a GPU with jax 0.4, so only CPU processes are refused."""
    from xmfu.harness.machine.compat import compare

    if processes > 1 and platform == "cpu" and compare(version, "0.5") < 0:
        return (f"jax {version} with {processes} CPU processes: its distributed step changed the reference's "
                "weights and aborted in gloo here (jax 0.4); use jax 0.5 or later for multi-process CPU runs")
    return None


def prepare_parallel(case: TrainSpec, ctx: RunContext, notes: dict[str, Any]) -> Prepared:
    import jax
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()  # every process's devices: the mesh spans them all
    run = case.on_devices(len(devices))
    why = run.split_problem() or processes_on_cpu_problem(jax.__version__, jax.process_count(), devices[0].platform)
    if why:
        raise Unavailable(why)
    mesh = Mesh(np.array(devices), (AXIS,))
    precision = "highest" if run.dtype == "fp32" else "default"  # as the single-device JAX backend
    tx = optax.adamw(run.lr, **ADAMW)
    lossf, plain = _losses(run, mesh)
    with jax.default_matmul_precision(precision):
        # process 0's single-device step first, while its device holds no distributed state (as torch_parity.py)
        ref = jax_parity.single_device_reference(run, check_step(plain, tx), tx)
        state = _state(run, mesh, tx)
        check = _check(run, mesh, lossf, tx, state, ref)
        del ref
        batch = tuple(_global(a, NamedSharding(mesh, P(AXIS))) for a in run.batch_tokens())
        start = time.perf_counter()
        compiled = _pinned(_train_step(lossf, tx), state, mesh).lower(state["params"], state["opt"], *batch).compile()
        compile_s = time.perf_counter() - start
        no_comm, whole = _no_comm(run, mesh, plain, tx, state, batch)

    def step() -> Any:
        state["params"], state["opt"], loss = compiled(state["params"], state["opt"], *batch)
        return loss

    def step_no_comm() -> Any:
        state["params"], state["opt"], loss = no_comm(state["params"], state["opt"], *batch, *whole)
        return loss

    found = jax_comm.hlo_collectives(compiled.as_text(), run.devices)
    notes = {**notes, "strategy": run.parallel, "world_size": run.devices, "processes": jax.process_count(),
             "compile_s": compile_s, "matmul_precision": precision, "comm": parallel.compiled(found, run),
             "hlo_collectives": {**jax_comm.summary(found),
                                 "bytes_per_rank": parallel.bytes_per_rank(found, run.devices)},
             "reference_device": check["reference_device"],
             "no_comm_hlo_collectives": jax_comm.summary(jax_comm.hlo_collectives(no_comm.as_text(), run.devices)),
             "comm_alone_collectives": {"source": "the compiled step's HLO",
                                        "collectives": [c.as_dict() for c in found]},
             "rank_map": [{"device": str(d), "id": d.id, "process": d.process_index} for d in devices],
             "step_memory": step_memory(compiled)}
    variants = {"no_comm": step_no_comm, "comm_alone": jax_comm.collectives_alone(found, devices)}
    return Prepared(step, lambda select: check, "jax", notes=notes, peak_memory=_peak_memory(notes),
                    peak_memory_source=PEAK_MEMORY_SOURCE, case=run,
                    fixed=FixedPlan(run.warmup, run.samples, 1), gather=_gather(notes), rank_combine="max",
                    variants=variants)


# On top of frameworks.JAX_PEAK_SOURCE: the single-device check and the no-comm variant's replicated parameters
# count too. XLA's own per-device figure for the step is notes.step_memory.
PEAK_MEMORY_SOURCE = f"{JAX_PEAK_SOURCE}; the step's own: notes.step_memory"


def step_memory(compiled: Any) -> dict[str, int] | None:
    """XLA's buffer assignment for one device of the compiled step (Compiled.memory_analysis(), jaxlib's
    CompiledMemoryStats): arguments, outputs, temporaries, donated (aliased) bytes and the peak it plans. None
    where the runtime does not say."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # not every runtime implements it
        return None
    if stats is None:
        return None
    fields = {"argument_bytes": "argument_size_in_bytes", "output_bytes": "output_size_in_bytes",
              "temp_bytes": "temp_size_in_bytes", "alias_bytes": "alias_size_in_bytes",
              "peak_bytes": "peak_memory_in_bytes"}
    return {name: int(getattr(stats, attr)) for name, attr in fields.items() if getattr(stats, attr, None) is not None}


def _device_peaks() -> list[int | None]:
    """Each local device's peak bytes in use, where the runtime reports it (GPUs, TPUs; not CPUs)."""
    import jax

    out: list[int | None] = []
    for d in jax.local_devices():
        try:
            stats = d.memory_stats() or {}
        except Exception:  # not every runtime implements it
            stats = {}
        out.append(int(stats["peak_bytes_in_use"]) if stats.get("peak_bytes_in_use") is not None else None)
    return out


def _peak_memory(notes: dict[str, Any]) -> Callable[[], int | None]:
    """The largest peak over this process's devices, read after timing; a one-process run also records every
    device's (a multi-process run's gather records every process's)."""
    def peak() -> int | None:
        peaks = _device_peaks()
        known = [p for p in peaks if p is not None]
        notes.setdefault("per_rank_peak_memory_bytes", peaks)
        return max(known) if known else None

    return peak


def _gather(notes: dict[str, Any]) -> Callable[[list[float]], list[list[float]]] | None:
    """Every process's samples (one list per process) and peak memory, in a multi-process run."""
    import jax

    if jax.process_count() == 1:
        return None
    from jax.experimental import multihost_utils

    def gather(samples: list[float]) -> list[list[float]]:
        known = [p for p in _device_peaks() if p is not None]
        peaks = multihost_utils.process_allgather(np.array([max(known) if known else -1], dtype=np.int64))
        notes["per_rank_peak_memory_bytes"] = [int(p) if p >= 0 else None for p in np.ravel(peaks)]
        return multihost_utils.process_allgather(np.asarray(samples, dtype=np.float64)).tolist()

    return gather
