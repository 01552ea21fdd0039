"""The torch.distributed backend against a fake NCCL group (tests/fakes/fake_nccl.py) on a fake GPU
(tests/fakes/fake_gpu.py): every tensor handed to a collective must be on the group's device, and object
collectives and barriers need this rank's GPU set as the current device. The gloo path runs for real in
tests/e2e/test_collectives_runs.py."""

from __future__ import annotations

import pytest

from tests.conftest import gpu_device, run_config
from tests.fakes.fake_gpu import fake_gpu
from tests.fakes.fake_nccl import FakeNcclDist
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.platform import Platform
from xmfu.workloads.collectives import torch_dist
from xmfu.workloads.collectives.spec import CollectiveCase

GPU = 1  # this rank's GPU: not the default device 0, so a forgotten set_device shows


def _ctx() -> RunContext:
    device = gpu_device("NVIDIA H100 80GB HBM3", 132, index=GPU)
    return RunContext(run_config(), Platform("cuda", (device,), "test"))  # the backend reads only the platform


def _run(case: CollectiveCase, fake: FakeNcclDist, monkeypatch) -> dict:
    fake.install(monkeypatch)
    with fake_gpu(GPU):
        prepared = torch_dist.prepare(case, _ctx())
        if prepared.fixed.before_sample:
            prepared.fixed.before_sample()
        prepared.fn()
        result = prepared.result(None)
        assert prepared.gather([1.0, 2.0]) == [[1.0, 2.0]]
    assert case.check(result).ok, result
    return prepared.notes


@pytest.mark.parametrize(("op", "in_place"), [("all_reduce", True), ("all_gather", False), ("all_gather", True),
                                              ("reduce_scatter", False), ("reduce_scatter", True),
                                              ("all_to_all", False)])
def test_every_collective_tensor_is_on_the_nccl_groups_gpu(op, in_place, monkeypatch):
    # The wrong-element count was summed in a host tensor: an nccl group has no CPU backend, so every row failed.
    fake = FakeNcclDist(own_gpu=GPU)
    notes = _run(CollectiveCase(op, 1024, "fp32", in_place, "throughput"), fake, monkeypatch)
    assert notes["library"] == "torch.distributed (nccl)" and notes["nccl_version"] == "2.21.5"
    assert fake.init_calls and fake.init_calls[0][0] == "nccl"


def test_latency_barrier_and_object_collectives_run_on_this_ranks_gpu_when_the_group_already_exists(monkeypatch):
    # A group formed before this backend ran (an earlier job in the process, another library): set_device must
    # still happen, or NCCL's barrier and all_gather_object use cuda:0 on every rank.
    fake = FakeNcclDist(own_gpu=GPU, initialized=True)
    _run(CollectiveCase("all_reduce", 1024, "fp32", True, "latency"), fake, monkeypatch)
    assert fake.init_calls == [] and fake.current_gpu == GPU
