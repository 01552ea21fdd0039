"""JAX collectives: shard_map over a 1-D mesh of every device, with psum / all_gather / psum_scatter /
all_to_all. The compiled HLO must still contain the collective: XLA may merge, rewrite or drop them.

On a CPU, `XLA_FLAGS=--xla_force_host_platform_device_count=N` gives N devices.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from xmfu.harness.engine.case import FixedPlan, Prepared, RunAborted, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.dtypes import DTYPES
from xmfu.harness.machine.jax_distributed import JaxJoinFailed, jax_unavailable
from xmfu.workloads.collectives.spec import CollectiveCase, expected_output, rank_input

HLO_NAMES = {  # what the compiled module may call each collective
    "all_reduce": ("all-reduce",), "all_gather": ("all-gather",), "all_to_all": ("all-to-all",),
    "reduce_scatter": ("reduce-scatter", "all-reduce"),  # some backends lower it to all-reduce + slice
}


def available(case: CollectiveCase, ctx: RunContext) -> tuple[bool, str]:
    try:  # joining the processes waits at most timeout_s; without every process nothing distributed can run
        why = jax_unavailable(ctx.platform.kind, case.timeout_s)
    except JaxJoinFailed as exc:
        raise RunAborted(str(exc)) from None
    if why:
        return False, why
    if case.op == "broadcast":
        return False, "JAX has no broadcast collective (a masked psum would be a different operation)"
    if case.op == "all_to_all_v":
        return False, ("all_to_all_v is jax.lax.ragged_all_to_all, which XLA:CPU does not implement (jax 0.10.2: "
                       "'HLO opcode ragged-all-to-all is not supported by XLA:CPU ThunkEmitter'); xmfu has not "
                       "built its GPU path yet: the torch_dist backend runs it")
    if case.in_place and case.op in ("all_gather", "reduce_scatter"):
        return False, "in place (a donated input) needs the output shape to equal the input's"
    return True, ""


def lax_collective(op: str) -> Any:
    """The lax collective of `op` over the mesh axis "x", as shard_map runs it on each device's block."""
    from jax import lax

    return {"all_reduce": lambda x: lax.psum(x, "x"),
            "all_gather": lambda x: lax.all_gather(x, "x", tiled=True),
            "reduce_scatter": lambda x: lax.psum_scatter(x, "x", tiled=True),
            "all_to_all": lambda x: lax.all_to_all(x, "x", 0, 0, tiled=True)}[op]


def shard_map_api(jax_module: Any) -> tuple[str, Callable[..., Any]]:
    """(name, function) of this JAX's shard_map: `jax.shard_map` from JAX 0.6.1 on (f positional, then keyword-only
    mesh, in_specs, out_specs, check_vma), else `jax.experimental.shard_map.shard_map` (JAX 0.4.x-0.6.0: f, mesh,
    in_specs, out_specs, check_rep). Sources: jax-ml/jax tags jax-v0.4.30, jax-v0.6.0 and jax-v0.6.1."""
    top = getattr(jax_module, "shard_map", None)
    if top is not None:
        return "jax.shard_map", top
    legacy = importlib.import_module(f"{jax_module.__name__}.experimental.shard_map")
    return "jax.experimental.shard_map.shard_map", legacy.shard_map


def map_collective(case: CollectiveCase, mesh: Any, jax_module: Any) -> Any:
    """The collective mapped over `mesh`. mesh, in_specs and out_specs are keywords both shard_maps accept; the
    replication check (check_vma, formerly check_rep) keeps its default, on, in both."""
    from jax.sharding import PartitionSpec as P

    _, shard_map = shard_map_api(jax_module)
    return shard_map(lax_collective(case.op), mesh=mesh, in_specs=P("x"), out_specs=P("x"))


def _compile(case: CollectiveCase, mesh: Any, x: Any) -> tuple[Any, str, float]:
    import jax

    mapped = map_collective(case, mesh, jax)
    start = time.perf_counter()
    compiled = jax.jit(mapped, donate_argnums=(0,) if case.in_place else ()).lower(x).compile()
    compile_s = time.perf_counter() - start
    hlo = compiled.as_text()
    found = next((name for name in HLO_NAMES[case.op] if name in hlo), None)
    if found is None:
        raise RuntimeError(f"the compiled HLO has no {HLO_NAMES[case.op][0]}: XLA removed the collective")
    return compiled, found, compile_s


def _check(case: CollectiveCase, out: Any, n: int, lay: Any) -> int:
    """Wrong elements in this process's shards (device r holds output slice r), summed over processes."""
    import jax

    per_device = lay.output_count
    wrong = 0
    for shard in out.addressable_shards:
        r = (shard.index[0].start or 0) // per_device
        got = np.asarray(shard.data).astype(np.float64)
        wrong += int(np.sum(got != expected_output(case.op, r, n, lay)))
    if case.inject_corruption and jax.process_index() == jax.process_count() - 1:
        wrong += 1
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        wrong = int(np.sum(multihost_utils.process_allgather(np.array([wrong]))))
    return wrong


def prepare(case: CollectiveCase, ctx: RunContext) -> Prepared:
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    # Deliberately every process's devices (after jax.distributed in a multi-process run), not jax.local_devices():
    # the collective spans all of them.
    devices = jax.devices()
    n = len(devices)
    if n == 1 and case.op != "all_reduce":
        raise Unavailable("one device: set XLA_FLAGS=--xla_force_host_platform_device_count=N on a CPU")
    lay = case.layout(n)
    storage = DTYPES[case.dtype].storage
    host = np.concatenate([rank_input(case.op, r, lay) for r in range(n)]).astype(storage)  # device r: slice r
    mesh = Mesh(np.array(devices), ("x",))
    sharding = NamedSharding(mesh, P("x"))

    def fresh() -> Any:
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    state = {"x": fresh()}
    compiled, found, compile_s = _compile(case, mesh, state["x"])

    def call() -> Any:
        out = compiled(state["x"])
        if case.in_place:  # the input was donated: the output (same shape) feeds the next call
            state["x"] = out
        return out

    def result(select: Any) -> dict[str, int]:
        wrong = _check(case, compiled(fresh()), n, lay)
        if case.in_place:
            state["x"] = fresh()
        return {"wrong": wrong, "elements": lay.output_count * n, "ranks": n}

    gather = None
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        def gather(samples: list[float]) -> list[list[float]]:
            return multihost_utils.process_allgather(np.asarray(samples, dtype=np.float64)).tolist()

    latency = case.mode == "latency"
    plan = FixedPlan(case.warmup, case.samples, 1 if latency else case.iters,
                     before_sample=latency_barrier if latency else None)
    notes = {"library": "shard_map + lax collectives", "shard_map": shard_map_api(jax)[0], "ranks": n,
             "processes": jax.process_count(),
             "hlo_op": found, "compile_s": compile_s, "bytes": lay.bytes, "in_place": case.in_place,
             "devices": [str(d) for d in devices]}
    if latency:
        notes["barrier"] = LATENCY_BARRIER
    return Prepared(call, result, "jax", notes=notes, fixed=plan, gather=gather,
                    rank_combine="max" if latency else "mean")


LATENCY_BARRIER = "jax.experimental.multihost_utils.sync_global_devices before each sample, outside the timed region"


def latency_barrier() -> None:
    """Every process starts a latency sample together, as torch_dist.py's dist.barrier(): otherwise a process
    that arrives late makes the others' timed collective include waiting for it. sync_global_devices(name) is
    JAX's barrier across hosts (jax/experimental/multihost_utils.py, jax 0.10.2: an all-gather of the name's
    CRC32 that returns to the host); with one process there is nothing to wait for."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("xmfu collectives latency sample")
