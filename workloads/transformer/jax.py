"""The transformer step in JAX: jit-compiled forward, backward and optax AdamW, buffers donated; on one device,
or over every device of the run with `dp` or `fsdp` (jax_parallel.py), or a mixture of experts' experts split
over them with `ep` (jax_ep_step.py)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from xmfu.harness.engine.case import Prepared, RunAborted
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import JAX_PEAK_SOURCE, local_jax_device
from xmfu.harness.machine.jax_distributed import JaxJoinFailed, jax_unavailable
from xmfu.workloads.transformer import fp8, jax_parallel
from xmfu.workloads.transformer.spec import ADAMW, TrainSpec


def fp8_check(case: TrainSpec, params: dict, tokens: Any, targets: Any, tx: Any) -> dict[str, list[float]]:
    """The fp8 step's and the bf16 step's losses over fp8.CHECK_STEPS AdamW steps from the same initial weights,
    on the check batch (fp8.py checks them against each other)."""
    import jax
    import jax.numpy as jnp
    import optax

    from xmfu.workloads.transformer.jax_model import loss_fn

    def curve(recipe: str) -> list[float]:
        lossf = partial(loss_fn, case.model, dtype=jnp.bfloat16, fp8=recipe)

        @jax.jit
        def step(p, state):
            loss, grads = jax.value_and_grad(lossf)(p, tokens, targets)
            updates, state = tx.update(grads, state, p)
            return optax.apply_updates(p, updates), state, loss

        p, state, losses = params, tx.init(params), []
        for _ in range(fp8.CHECK_STEPS):
            p, state, loss = step(p, state)
            losses.append(float(loss))
        return losses

    return fp8.LossCurves(curve(case.fp8), curve("none")).as_result()


def moe_version_problem(case: TrainSpec) -> str | None:
    """Why this JAX cannot run a mixture of experts' step, or None. jax 0.4.38 (scripts/compat.sh floor) gave a
    step-0 loss 2.6% off the fp64 model (5.449 against 5.593: the row incorrect) where jax 0.10.2 agrees to 1e-4;
    the versions between were not tried."""
    import jax

    from xmfu.harness.machine.compat import compare

    if case.model.moe and compare(jax.__version__, "0.5") < 0:
        return (f"jax {jax.__version__}'s ragged_dot gave a mixture of experts' step 2.6% off the fp64 model here "
                "(jax 0.4.38); use jax 0.5 or later for MoE models")
    return None


def available(case: TrainSpec, ctx: RunContext) -> tuple[bool, str]:
    try:  # joining the processes waits at most timeout_s; without every process nothing distributed can run
        why = jax_unavailable(ctx.platform.kind, case.timeout_s) or jax_parallel.unavailable(case)
    except JaxJoinFailed as exc:
        raise RunAborted(str(exc)) from None
    if why:
        return False, why
    why = moe_version_problem(case)
    if why:
        return False, why
    if case.fp8 != "none" and case.distributed:
        return False, fp8.distributed_problem(case.parallel)
    import importlib.util

    if importlib.util.find_spec("optax") is None:
        return False, "optax is not installed (pip install 'xmfu[jax]')"
    return True, ""


def prepare(case: TrainSpec, ctx: RunContext) -> Prepared:
    if case.parallel == "ep":
        from xmfu.workloads.transformer.jax_ep_step import prepare_ep

        return prepare_ep(case, ctx, notes={"library": "jax.jit + optax.adamw, shard_map + jax.lax.all_to_all"})
    if case.distributed:
        return jax_parallel.prepare_parallel(case, ctx, notes={"library": "jax.jit + optax.adamw, NamedSharding"})
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from xmfu.workloads.transformer.jax_fp8 import gemm_note
    from xmfu.workloads.transformer.jax_model import global_norm, loss_and_routing
    from xmfu.workloads.transformer.jax_moe import EXPERT_GEMM
    from xmfu.workloads.transformer.routing import RoutingLog

    device = local_jax_device(ctx.config.device_index)  # this process's (jax.devices() spans all processes)
    dtype = jnp.bfloat16 if case.dtype == "bf16" else jnp.float32
    # fp32 means fp32: JAX's default matmul precision on GPUs is TF32 (and bf16 passes on TPUs).
    precision = "highest" if case.dtype == "fp32" else "default"
    params = {n: jax.device_put(w, device) for n, w in case.weights().items()}
    tokens, targets = (jax.device_put(a, device) for a in case.batch_tokens())
    lossf = partial(loss_and_routing, case.model, dtype=dtype, checkpointing=case.activation_checkpointing,
                    fp8=case.fp8)
    sel = case.check_rows()
    tx = optax.adamw(case.lr, **ADAMW)
    rows = (slice(None, sel["batch"]), slice(None, sel["tokens"]))
    if case.fp8 != "none":  # the fp8 step's losses against the bf16 step's over a few steps (fp8.py)
        check = fp8_check(case, params, tokens[rows], targets[rows], tx)
    else:
        with jax.default_matmul_precision(precision):
            (loss, _), grads = jax.jit(jax.value_and_grad(lossf, has_aux=True))(params, tokens[rows], targets[rows])
        check = {"loss": float(loss), "grad_norm": float(global_norm(grads))}
    routing = RoutingLog(case.model, EXPERT_GEMM, np.asarray) if case.model.moe else None

    def train_step(params, opt_state, x, y):
        (loss, counts), grads = jax.value_and_grad(lossf, has_aux=True)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        per_block = None if counts is None else counts.max(-1) / counts.mean(-1)  # (MoE blocks,) max/mean
        return optax.apply_updates(params, updates), opt_state, loss, per_block

    state = {"params": params, "opt": tx.init(params)}
    start = time.perf_counter()
    with jax.default_matmul_precision(precision):
        compiled = jax.jit(train_step, donate_argnums=(0, 1)).lower(state["params"], state["opt"], tokens,
                                                                    targets).compile()
    compile_s = time.perf_counter() - start

    def step():
        state["params"], state["opt"], loss, per_block = compiled(state["params"], state["opt"], tokens, targets)
        if routing is not None:
            routing.add(per_block)
        return loss

    def peak_memory() -> int | None:
        stats = device.memory_stats() if hasattr(device, "memory_stats") else None
        return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None

    notes = {"library": "jax.jit + optax.adamw", "compile_s": compile_s, "matmul_precision": precision,
             "optimizer": f"optax.adamw {ADAMW}", "jax_device_kind": device.device_kind}
    if routing is not None:
        notes["expert_gemm"] = EXPERT_GEMM
    if case.fp8 != "none":
        notes["fp8"] = {"recipe": case.fp8, "library": "jax.lax.dot_general on float8 operands, custom_vjp "
                        "(jax_fp8.py)", "gemm": gemm_note(ctx.platform.kind, compiled.as_text()),
                        "not_fp8": fp8.NOT_FP8}
    return Prepared(step, lambda select: check, "jax", notes=notes, peak_memory=peak_memory,
                    peak_memory_source=JAX_PEAK_SOURCE, recorded=routing.figures if routing else None)
