"""The JAX expert-parallel step (workloads/transformer/jax_ep.py, jax_ep_step.py): the ep byte formula shared with
torch against hand counts, one MoE block split over 2 devices against the single-device block (outputs, counts,
load-balancing term and gradients, including a routing that sends every token to one device), and the refusals.
The devices are a named vmap axis here (the lax collectives run on it as on a mesh axis); the step over 2 forced
host devices under shard_map: tests/e2e/test_transformer_parallel_runs.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.workloads.test_transformer_moe import MOE_TINY, preset
from xmfu.workloads.collectives.spec import bus_factor
from xmfu.workloads.transformer import parallel
from xmfu.workloads.transformer.cases import TrainCase
from xmfu.workloads.transformer.spec import TrainSpec, init_weights


def test_ep_exchange_bytes_count_the_rows_that_leave_the_rank():
    # rank 0 sends 3 rows to itself and 5 to rank 1, receives 3 from itself and 7 from rank 1: (5 + 7) rows leave
    # it in the forward (dispatch 5, combine 7) and as many again in the backward
    assert parallel.ep_exchange_bytes([3, 5], [3, 7], 0, row_bytes=256) == 2 * (5 + 7) * 256
    assert parallel.ep_exchange_bytes([3, 5], [3, 7], 1, row_bytes=256) == 2 * (3 + 3) * 256
    # an even split of S bytes per rank: (n-1)/n of it leaves, nccl-tests' alltoall bus factor, per exchange
    n, rows, row_bytes = 4, 6, 128
    per_exchange = parallel.ep_exchange_bytes([rows] * n, [rows] * n, 2, row_bytes) / 4
    assert per_exchange == bus_factor("all_to_all", n) * n * rows * row_bytes
    assert parallel.ep_bytes_per_rank(1000.0, 10, 2) == 1000 + 2 * (2 - 1) / 2 * 10 * 4  # fp32 gradients
    assert parallel.ep_bytes_per_rank(0.0, 10, 1) == 0


def test_the_payload_follows_each_devices_routing():
    """Device 0 sends 4 assignments to each device, device 1 all 8 to itself: device 0 sends 4 rows and gets none
    back from device 1; device 1 sends none and returns device 0's 4."""
    pytest.importorskip("jax")
    from xmfu.workloads.transformer.jax_ep_step import _payload

    one_block = TrainSpec(dataclasses.replace(MOE_TINY, n_layers=1), "fp32", parallel="ep", world_size=2)
    counts = np.array([[3, 1, 2, 2], [0, 0, 5, 3]])  # (devices x MoE blocks, E): 2 experts per device
    got = _payload(one_block, counts)
    replicated = sum(int(np.prod(s)) for k, s in one_block.model.weight_shapes().items() if ".experts." not in k)
    row = MOE_TINY.d_model * 4
    assert got["per_device"] == [2 * 4 * row + 4 * replicated, 2 * 4 * row + 4 * replicated]
    assert got["bytes_per_rank"] == got["per_device"][0] and "2 x (rows sent" in got["formula"]


def _split(params: dict, n: int) -> dict:
    """Every device's view stacked on a leading axis: its E/n experts, the rest whole."""
    import jax.numpy as jnp

    from xmfu.workloads.transformer.jax_ep import is_expert

    return {k: (v.reshape(n, -1, *v.shape[1:]) if is_expert(k) else jnp.stack([v] * n)) for k, v in params.items()}


@pytest.mark.parametrize("skewed", [False, True])
def test_an_expert_parallel_block_is_the_single_device_block(skewed):
    """Two devices, each its own tokens: the same output, the same tokens per expert in total, the same
    load-balancing term and the same gradients. `skewed`: a router that sends every token to experts 0 and 1,
    both on device 0 (the most uneven split: device 1's whole send buffer is bound there, the dropless worst case)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from xmfu.workloads.transformer.jax import moe_version_problem
    from xmfu.workloads.transformer.jax_ep import Exchange, ep_moe, is_expert
    from xmfu.workloads.transformer.jax_moe import moe

    n, pre, spec = 2, "layers.0.feed_forward.", MOE_TINY
    if why := moe_version_problem(TrainCase(spec, "fp32")):  # the workload refuses it too (jax 0.4.38: vmap of
        pytest.skip(why)  # ragged_dot's gradient raises in broadcast_in_dim)
    params = {k: jnp.asarray(v) for k, v in init_weights(spec, 0).items() if k.startswith(pre)}
    if skewed:
        bias = np.zeros((spec.n_experts, spec.d_model), np.float32)
        bias[:2] = 50.0  # positive inputs below: experts 0 and 1 score highest for every token
        params[pre + "router.weight"] = params[pre + "router.weight"] + bias
    x = jax.random.normal(jax.random.PRNGKey(0), (2 * n, 8, spec.d_model))
    x = jnp.abs(x) if skewed else x

    def single(p, x):
        out, counts, aux = moe(spec, p, pre, x, jnp.float32)
        return jnp.mean(out ** 2) + aux, (out, counts)

    def device(p, x):
        out, counts, aux = ep_moe(spec, p, pre, x, jnp.float32, ex=Exchange(n))
        return jax.lax.pmean(jnp.mean(out ** 2) + aux, "data"), (out, counts)

    def split_loss(p, xs):
        loss, aux = jax.vmap(device, axis_name="data")(p, xs)
        return loss[0], aux

    (loss, (out, counts)), grads = jax.jit(jax.value_and_grad(single, has_aux=True))(params, x)
    (ep_loss, (ep_out, ep_counts)), ep_grads = jax.jit(jax.value_and_grad(split_loss, has_aux=True))(
        _split(params, n), x.reshape(n, 2, 8, -1))
    if skewed:
        assert counts.tolist() == [2 * n * 8, 2 * n * 8, 0, 0]
    np.testing.assert_allclose(ep_out.reshape(out.shape), out, rtol=1e-6, atol=1e-7)
    assert ep_counts.sum(0).tolist() == counts.tolist()
    np.testing.assert_allclose(ep_loss, loss, rtol=1e-6)
    for name, want in grads.items():  # a replicated weight's gradient: the devices' copies summed
        got = ep_grads[name].reshape(want.shape) if is_expert(name) else ep_grads[name].sum(0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * float(jnp.abs(want).max()), err_msg=name)


def test_the_no_communication_exchange_keeps_what_it_would_send():
    jnp = pytest.importorskip("jax.numpy")
    from xmfu.workloads.transformer.jax_ep import Exchange

    a, twin = jnp.arange(6.0).reshape(2, 3), Exchange(2, collective=False)
    assert twin.all_to_all(a) is a and twin.psum(a) is a and twin.pmean(a) is a


def test_jax_runs_ep_for_a_mixture_of_experts_and_says_why_not_otherwise(cpu_ctx):
    pytest.importorskip("jax")
    from xmfu.workloads.transformer import jax as jax_backend

    ok, why = jax_backend.available(TrainCase(preset("tiny"), "fp32", parallel="ep", world_size=None), cpu_ctx)
    assert not ok and "is dense" in why
    for strategy in ("dp", "fsdp"):
        ok, why = jax_backend.available(TrainCase(MOE_TINY, "fp32", parallel=strategy, world_size=None), cpu_ctx)
        assert not ok and "runs across devices as ep" in why
    ep = TrainCase(MOE_TINY, "fp32", parallel="ep", world_size=None)
    old_jax = jax_backend.moe_version_problem(ep)  # jax 0.4: any MoE step is refused, with its reason
    assert jax_backend.available(ep, cpu_ctx) == ((False, old_jax) if old_jax else (True, ""))
    assert "split evenly over the 3 ranks" in parallel.ep_problem(MOE_TINY, 3)
