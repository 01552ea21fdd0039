"""Expert parallelism in JAX (`workload.parallel=ep`, backend jax): a mixture of experts' routed experts split over
the devices of a 1-D mesh (axis "data"), tokens sent to their experts' device and back with `jax.lax.all_to_all`
inside shard_map, everything else replicated. The split is torch_ep.py's: device r holds experts
[r·E/n, (r+1)·E/n) of every MoE block and runs its own per_device_batch sequences.

In each MoE block a device routes its own tokens as jax_moe.py does and lays every assignment into a send buffer
(n, C, D): block q holds the assignments bound for device q's experts, sorted by expert, then zero rows. XLA
needs static shapes and the split is uneven and changes every step, so C is the dropless worst case, all T·k of
the device's assignments bound for one device: no token is ever dropped (a capacity factor below that drops the
overflow: Switch Transformer, Fedus et al. 2021, §2.2), and the padding travels with the rows.
`jax.lax.ragged_all_to_all` would send the rows alone (uneven splits), but XLA:CPU does not implement it (jax
0.10.2: "HLO opcode `ragged-all-to-all` is not supported by XLA:CPU ThunkEmitter"), so the padded exchange is
the one built; the row records what moved and, beside it, what the routing needed (parallel.ep_exchange_bytes).

The loss is the devices' local losses averaged (pmean), the load-balancing term on the global token shares (a psum
of the counts) and this device's router probabilities, so it equals the single-device loss on the same global
batch (the term is linear in the probabilities). Its gradient is taken outside shard_map and JAX's transposes do
the rest: all_to_all's is the reverse exchange (jax/_src/lax/parallel.py, _all_to_all_transpose_rule), and a
replicated parameter's gradient is summed over the devices (the transpose of its implicit pvary is a psum).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp

from xmfu.workloads.transformer.jax_model import loss_and_routing
from xmfu.workloads.transformer.jax_moe import Linear, plain_linear, ragged, route, shared_expert
from xmfu.workloads.transformer.spec import ModelSpec, TrainSpec

AXIS = "data"  # jax_parallel.py's mesh axis
Params = dict[str, jax.Array]
EXCHANGE = ("jax.lax.all_to_all inside shard_map, each destination's block padded to the dropless worst case "
            "(T·k rows: every assignment of the device); jax.lax.ragged_all_to_all is not implemented by XLA:CPU")


@dataclass(frozen=True)
class Exchange:
    """The ep step's collectives over `n` devices, or, with `collective=False`, none of them: each device keeps
    what it would send (the no-communication twin: the same buffer shapes, no collective)."""

    n: int
    collective: bool = True

    def all_to_all(self, a: jax.Array) -> jax.Array:
        """a (n, ...): block q goes to device q; the result's block q came from device q."""
        return jax.lax.all_to_all(a, AXIS, 0, 0, tiled=True) if self.collective else a

    def psum(self, a: jax.Array) -> jax.Array:
        return jax.lax.psum(a, AXIS) if self.collective else a

    def pmean(self, a: jax.Array) -> jax.Array:
        return jax.lax.pmean(a, AXIS) if self.collective else a


def is_expert(name: str) -> bool:
    """A routed expert's weight, split over the devices on dim 0 (the expert index)."""
    return ".experts." in name


def _local_experts(p: Params, prefix: str, xs: jax.Array, ids: jax.Array, local: int, dtype: Any) -> jax.Array:
    """xs (N, D) received rows, ids (N,) their local expert (`local` on a padding row): the experts' SwiGLU as one
    ragged_dot per projection, in xs's order. Rows past the groups' sum (the padding, sorted last) come out zero
    (ragged_dot), so they carry no gradient."""
    order = jnp.argsort(ids, stable=True)
    sizes = jnp.bincount(ids, length=local + 1)[:local].astype(jnp.int32)  # (local,): padding not counted
    xs = xs[order]
    h = jax.nn.silu(ragged(xs, p[prefix + "experts.w1"], sizes, dtype)) * ragged(xs, p[prefix + "experts.w3"], sizes,
                                                                                  dtype)
    out = ragged(h, p[prefix + "experts.w2"], sizes, dtype)
    return jnp.zeros_like(out).at[order].set(out)  # back to the received order


def ep_moe(spec: ModelSpec, p: Params, prefix: str, x: jax.Array, dtype: Any, linear: Linear = plain_linear,
           *, ex: Exchange) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One device's part of a MoE block: x (B, S, D) its tokens -> (output (B, S, D), this device's tokens per
    expert (E,), its load-balancing term on the global shares). p holds this device's experts (E/n, ...)."""
    b, s, d = x.shape
    e, k, n = spec.n_experts, spec.top_k, ex.n
    local, cap = e // n, b * s * k  # experts per device; rows per destination block (dropless)
    flat = x.reshape(b * s, d)  # (T, D)
    weights, experts, probs = route(spec, p, prefix, flat)
    assignments = experts.reshape(-1)  # (T·k,)
    counts = jnp.bincount(assignments, length=e)  # (E,) this device's
    aux = e * jnp.sum(ex.psum(counts).astype(jnp.float32) / (n * cap) * jnp.mean(probs, axis=0))
    order = jnp.argsort(assignments, stable=True)  # by expert, hence by the device holding it
    token, expert = order // k, assignments[order]
    dest = expert // local
    per_dest = counts.reshape(n, local).sum(1)  # (n,) the uneven split
    slot = jnp.arange(cap) - (jnp.cumsum(per_dest) - per_dest)[dest]  # each assignment's row in its block
    send = jnp.zeros((n, cap, d), dtype).at[dest, slot].set(flat[token].astype(dtype))
    ids = jnp.full((n, cap), local, jnp.int32).at[dest, slot].set((expert % local).astype(jnp.int32))
    received, received_ids = ex.all_to_all(send), ex.all_to_all(ids)  # dispatch
    out = _local_experts(p, prefix, received.reshape(n * cap, d), received_ids.reshape(-1), local, dtype)
    back = ex.all_to_all(out.reshape(n, cap, d))  # combine: block q holds device q's outputs for what we sent it
    mine = back[dest, slot].astype(jnp.float32) * weights.reshape(-1)[order, None]  # (T·k, D)
    combined = jnp.zeros((b * s, d), jnp.float32).at[token].add(mine) + shared_expert(spec, p, prefix, flat, dtype,
                                                                                       linear)
    return combined.astype(x.dtype).reshape(b, s, d), jax.lax.stop_gradient(counts), aux


def local_loss(run: TrainSpec, ex: Exchange) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """(params, x, y) on one device -> (the loss, averaged over the devices by `ex`; this device's tokens per
    expert (MoE blocks, E))."""
    dtype = jnp.bfloat16 if run.dtype == "bf16" else jnp.float32

    def loss(params: Params, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
        value, counts = loss_and_routing(run.model, params, x, y, dtype, run.activation_checkpointing,
                                         moe_block=partial(ep_moe, ex=ex))
        return ex.pmean(value), counts

    return loss


def param_specs(names: Any) -> dict[str, Any]:
    from jax.sharding import PartitionSpec as P

    return {name: P(AXIS) if is_expert(name) else P() for name in names}


def mapped_loss(run: TrainSpec, mesh: Any, shard_map: Callable) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """(global params, global x, global y) -> (the loss, every device's tokens per expert (n·MoE blocks, E))."""
    from jax.sharding import PartitionSpec as P

    specs = param_specs(run.model.weight_shapes())
    return shard_map(local_loss(run, Exchange(run.devices)), mesh=mesh, in_specs=(specs, P(AXIS), P(AXIS)),
                     out_specs=(P(), P(AXIS)))


def imbalance(counts: jax.Array, n: int) -> jax.Array:
    """Every device's counts (n·MoE blocks, E) -> each block's global max/mean (MoE blocks,), as routing.py."""
    total = counts.reshape(n, -1, counts.shape[-1]).sum(0)
    return total.max(-1) / total.mean(-1)
