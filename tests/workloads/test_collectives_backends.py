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


# What torch 2.13's gloo raises when a peer is frozen (SIGSTOP) or gone, as seen on a CPU with a 3 s group timeout:
# plain RuntimeErrors, no torch.distributed.DistError (third_party/gloo/gloo/transport/tcp/unbound_buffer.cc, pair.cc).
GLOO_FROZEN_PEER = ("[third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 3000ms for send "
                    "operation to complete")


def _broken(*args, **kwargs):
    raise RuntimeError(GLOO_FROZEN_PEER)


@pytest.mark.parametrize("collective", ["all_gather_object", "all_reduce"])
def test_a_group_that_breaks_while_a_case_is_prepared_ends_the_run(collective, cpu_ctx, monkeypatch):
    """The rank map (all_gather_object) and the agreement on the check (all_reduce) run while the case is prepared
    and checked: a peer frozen there broke the group, yet the case failed as if on its own and the next case was
    prepared on the broken group. Any collective's failure is RunAborted: partial bundle, exit 1."""
    import torch.distributed as dist

    from xmfu.harness.engine.case import RunAborted

    case = CollectiveCase("all_gather", 1024, "fp32", False, "throughput")
    if collective == "all_gather_object":
        monkeypatch.setattr(dist, "all_gather_object", _broken)
        with pytest.raises(RunAborted, match="Timed out waiting"):
            torch_dist.prepare(case, cpu_ctx)
        return
    prepared = torch_dist.prepare(case, cpu_ctx)
    monkeypatch.setattr(dist, "all_reduce", _broken)
    with pytest.raises(RunAborted, match="Timed out waiting"):
        prepared.result(None)
    monkeypatch.setattr(dist, "all_gather_object", _broken)
    with pytest.raises(RunAborted):
        prepared.gather([1.0])


def test_an_accelerators_group_uses_the_backend_torch_maps_its_device_type_to(monkeypatch):
    """xpu -> xccl (built into torch's map since 2.6); Gaudi's hccl only once its package registers it; a device
    type with nothing registered is refused, never run over gloo on host tensors."""
    import torch.distributed as dist

    monkeypatch.delitem(dist.Backend.default_device_backend_map, "hpu", raising=False)
    assert [torch_dist.group_backend(k) for k in ("cuda", "rocm", "cpu", "xpu")] == ["nccl", "nccl", "gloo", "xccl"]
    monkeypatch.setattr(torch_dist, "torch_unavailable", lambda dtype, kind: None)  # as if torch drove the device
    hpu = gpu_device("GAUDI2", None, kind="hpu", vendor="intel")
    ctx = RunContext(run_config(), Platform("hpu", (hpu,), "test"))
    case = CollectiveCase("all_reduce", 1024, "fp32", True, "bandwidth")
    ok, why = torch_dist.available(case, ctx)
    assert not ok and "no backend registered for hpu" in why
    monkeypatch.setitem(dist.Backend.default_device_backend_map, "hpu", "fake")  # torch's testing backend
    assert torch_dist.group_backend("hpu") is None
    monkeypatch.setitem(dist.Backend.default_device_backend_map, "hpu", "hccl")  # what habana's package does
    assert torch_dist.group_backend("hpu") == "hccl" and torch_dist.available(case, ctx) == (True, "")
