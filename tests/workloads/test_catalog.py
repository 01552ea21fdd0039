"""The allow-list: every backend it names by module path exists, and says which framework it computes with."""

from __future__ import annotations

import pytest

from tests.conftest import run_config
from xmfu.harness.machine.platform import FRAMEWORKS
from xmfu.harness.run import frameworks_used
from xmfu.workloads.catalog import build_registry

REGISTRY = build_registry()
BACKENDS = [(w, b) for w, backends in REGISTRY.backends_by_workload().items() for b in backends]


@pytest.mark.parametrize(("workload", "backend"), BACKENDS, ids=[f"{w}-{b}" for w, b in BACKENDS])
def test_every_backend_resolves_to_functions(workload, backend):
    impl = REGISTRY.workload(workload).implementations[backend]
    assert callable(impl.available.resolve()) and callable(impl.prepare.resolve())
    assert len(impl.frameworks) == 1 and impl.frameworks[0] in FRAMEWORKS


def test_a_run_asks_only_the_frameworks_of_its_backends():
    assert frameworks_used(run_config(backends=["jax"]), REGISTRY) == ("jax",)
    assert frameworks_used(run_config(backends=["triton"]), REGISTRY) == ("torch",)  # Triton takes torch tensors
    with_mamf = run_config(backends=["jax"], mamf={"enabled": True, "backend": "torch", "m": [64], "n": [64],
                                                    "k": [64]})
    assert frameworks_used(with_mamf, REGISTRY) == ("torch", "jax")
