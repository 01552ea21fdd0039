"""The JAX collectives backend on JAX releases without `jax.shard_map` (before 0.6.1)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")  # a stack without JAX (scripts/compat.sh rocm64)

from jax.sharding import PartitionSpec as P

from tests.fakes.fake_jax_legacy import legacy_jax
from xmfu.workloads.collectives import jax as backend
from xmfu.workloads.collectives.spec import CollectiveCase

CASE = CollectiveCase("all_reduce", 1024, "fp32", False, "throughput")


def test_without_jax_shard_map_the_experimental_one_is_called_with_its_own_signature(monkeypatch):
    fake = legacy_jax(monkeypatch)
    assert backend.shard_map_api(fake) == ("jax.experimental.shard_map.shard_map",
                                           fake.experimental.shard_map.shard_map)
    backend.map_collective(CASE, "the mesh", fake)
    (call,) = fake.calls
    assert call["mesh"] == "the mesh" and call["in_specs"] == P("x") and call["out_specs"] == P("x")
    assert call["check_rep"] is True  # the legacy name of check_vma, left at its default like check_vma


@pytest.mark.filterwarnings("ignore:jax.experimental.shard_map is deprecated")
def test_a_real_run_falls_back_when_jax_has_no_shard_map(monkeypatch, cpu_ctx):
    import jax

    monkeypatch.delattr(jax, "shard_map", raising=False)  # jax 0.4.38 has none (scripts/compat.sh floor)
    prepared = backend.prepare(CASE, cpu_ctx)  # jax 0.10 still ships jax.experimental.shard_map (deprecated)
    prepared.fn()
    assert CASE.check(prepared.result(None)).ok
    assert prepared.notes["shard_map"] == "jax.experimental.shard_map.shard_map"


def test_the_top_level_shard_map_is_preferred(cpu_ctx):
    import jax

    if not hasattr(jax, "shard_map"):
        pytest.skip(f"jax {jax.__version__} has no jax.shard_map (0.6.1 and later)")
    assert backend.shard_map_api(jax) == ("jax.shard_map", jax.shard_map)
    assert backend.prepare(CASE, cpu_ctx).notes["shard_map"] == "jax.shard_map"
