"""The distributed backends in this process: one rank (a world of one on gloo) or one JAX device still runs
every part (wrapping, parity check, variants, collectives alone, profiler trace); several ranks, and JAX over
several devices (XLA_FLAGS must be set before JAX starts), run end to end in
tests/e2e/test_transformer_parallel_runs.py."""

from __future__ import annotations

import json

import pytest
import yaml

from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.workloads.transformer import jax as jax_backend
from xmfu.workloads.transformer import torch as torch_backend
from xmfu.workloads.transformer.cases import TrainCase
from xmfu.workloads.transformer.spec import model_from_config

TINY = model_from_config({**yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text()), "seq_len": 16})


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_torch_strategy_on_one_rank_checks_and_times_its_variants(strategy, cpu_ctx):
    case = TrainCase(TINY, "fp32", parallel=strategy, world_size=None, warmup=1, samples=2)
    ok, why = torch_backend.available(case, cpu_ctx)
    if not ok and "torch.cpu.Stream.record_event" in why:  # fsdp on torch 2.6's CPU: refused, with this reason
        pytest.skip(why)
    assert ok, why
    prepared = torch_backend.prepare(case, cpu_ctx)
    check = case.check(prepared.result(None))
    assert check.ok, check
    assert prepared.case.world_size == 1 and prepared.case.params()["world_size"] == 1
    assert prepared.rank_combine == "max" and prepared.fixed.samples == 2
    assert set(prepared.variants) == {"no_comm", "comm_alone"}
    losses = [float(prepared.fn()), float(prepared.variants["no_comm"]())]
    assert all(0 < loss < 10 for loss in losses)
    prepared.variants["comm_alone"]()
    collectives = prepared.notes["comm_alone_collectives"]["collectives"]
    assert collectives and {c["op"] for c in collectives} <= {"all_reduce", "all_gather", "reduce_scatter"}
    assert prepared.notes["comm"]["bytes_per_rank"] == 0  # one rank: nothing crosses a link
    assert len(prepared.notes["rank_map"]) == 1 and prepared.gather(prepared.fixed and [1.0]) == [[1.0]]
    # timing.cuda_graph never captures it: AdamW(capturable=False) refuses, which across ranks ended the run
    assert "capturable=False" in prepared.no_cuda_graph and "DDP/FSDP collectives" in prepared.no_cuda_graph


def test_strategies_a_backend_lacks_are_skipped_with_the_reason(cpu_ctx):
    ok, why = torch_backend.available(TrainCase(TINY, "fp32", parallel="dp", world_size=None), cpu_ctx)
    assert not ok and "JAX strategy" in why
    ok, why = jax_backend.available(TrainCase(TINY, "fp32", parallel="ddp", world_size=None), cpu_ctx)
    assert not ok and "torch's strategy" in why


def test_profile_attaches_a_chrome_trace(cpu_ctx):
    prepared = torch_backend.prepare(TrainCase(TINY, "fp32", profile=True), cpu_ctx)
    trace = json.loads(prepared.attachments["trace.json"])
    assert trace["traceEvents"] and any("aten::" in e.get("name", "") for e in trace["traceEvents"])


def test_ddp_collectives_alone_are_the_buckets_ddp_rebuilt():
    # Built without find_unused_parameters, DDP starts with one bucket of every parameter and logs that as
    # `bucket_sizes`; the buckets its backward all-reduces after the rebuild are `rebuilt_bucket_sizes`.
    import torch

    from xmfu.workloads.collectives.torch_dist import process_group
    from xmfu.workloads.transformer.torch_comm import ddp_bucket_bytes

    process_group("cpu", 0, 60)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.25)
    for _ in range(3):
        ddp(torch.ones(2, 256)).sum().backward()
    sizes = ddp_bucket_bytes(ddp)
    assert sizes and len(sizes) > 1 and sum(sizes) == 4 * sum(p.numel() for p in model.parameters())


def test_fsdp_no_comm_is_dropped_on_every_rank_when_one_rank_cannot_fit_it(cpu_ctx, monkeypatch):
    # A rank that times a variant the others lack takes its turns out of step with them: its step's
    # collectives meet another rank's collectives-alone, and the sample gathers differ in number.
    from types import SimpleNamespace

    import torch

    from xmfu.workloads.transformer import torch_parallel

    class AnotherRankOutOfMemory:  # all_reduce(MIN) of this rank's 1 with another rank's 0
        ReduceOp = torch.distributed.ReduceOp

        def all_reduce(self, tensor, op=None):
            assert op == self.ReduceOp.MIN
            tensor.zero_()

    monkeypatch.setattr(torch_parallel, "_no_comm_fsdp", lambda *args: (lambda: None))
    run = SimpleNamespace(parallel="fsdp", dtype="fp32")
    notes: dict = {}
    variants = torch_parallel._variants(run, cpu_ctx, AnotherRankOutOfMemory(), None, None, (None, None), None,
                                        notes)
    assert set(variants) == {"comm_alone"} and "every rank" in notes["no_comm"]


def test_single_device_step_makes_its_gpu_the_current_device(monkeypatch):
    # Under torchrun every rank runs the single-device step on its local rank's GPU (or on `device_index`):
    # torch.cuda.Event.record and torch.cuda.synchronize act on the current device, cuda:0 until it is set.
    import torch

    from tests.conftest import gpu_device, run_config
    from xmfu.harness.engine.context import RunContext
    from xmfu.harness.machine.platform import Platform
    from xmfu.workloads.transformer import torch_train

    class Stop(Exception):
        pass

    def set_device(device):
        raise Stop(str(device))

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    ctx = RunContext(run_config(), Platform("cuda", (gpu_device("NVIDIA H100 80GB HBM3", 132, index=3),), "test"))
    with pytest.raises(Stop, match="cuda:3"):
        torch_train.prepare_train(TrainCase(TINY, "fp32"), ctx, notes={})


def test_a_group_that_breaks_while_the_step_is_prepared_ends_the_run(cpu_ctx, monkeypatch):
    """DDP's construction (it broadcasts the parameters) and the rank map are collectives of the preparation: a
    frozen peer there (gloo: a plain RuntimeError, tests/workloads/test_collectives_backends.py) failed the case
    and the run went on to prepare the next on the broken group. Now it ends the run (RunAborted)."""
    import torch.distributed as dist

    from tests.workloads.test_collectives_backends import GLOO_FROZEN_PEER
    from xmfu.harness.engine.case import RunAborted

    def broken(*args, **kwargs):
        raise RuntimeError(GLOO_FROZEN_PEER)

    monkeypatch.setattr(dist, "all_gather_object", broken)
    with pytest.raises(RunAborted, match="Timed out waiting"):
        torch_backend.prepare(TrainCase(TINY, "fp32", parallel="ddp", world_size=None, warmup=1, samples=2), cpu_ctx)
