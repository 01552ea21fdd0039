"""What a run needs at least on a CPU, said before it starts (issue 42 item 8): `model=1b` began preparing a 24 GB
model on a 23.5 GiB machine, `experiment=mamf` and `-m dtype=fp32,bf16` started 2048^3-16384^3 without a word."""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

import pytest

from tests.engine.test_runner import FakeCase
from tests.test_run import _registry, _run
from xmfu.harness.engine import cost
from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.run import SetupError

# 2 cores x 2 GHz x 32 FLOPs a cycle (AVX2 + FMA, harness/machine/peaks.yaml): 0.128 TFLOP/s fp32
CPU = DeviceInfo(kind="cpu", name="test CPU", vendor="test", memory_bytes=int(25.3e9), multiprocessors=2,
                 cpu={"flags": ["avx2", "fma"], "clock_ghz": 2.0, "clock_source": "test", "physical_cores": 2})


@dataclass(frozen=True)
class Held(FakeCase):
    held: float = 0.0

    def memory_bytes(self) -> float:
        return self.held


def _phases(*cases) -> list:
    return [SimpleNamespace(cases=list(cases))]


def test_the_least_compute_and_memory_of_a_run_on_a_cpu():
    found = cost.run_cost(_phases(FakeCase(64_000_000_000), Held(1, held=3e9)), CPU, "fp32", warmup_min_iters=3)
    assert found.peak.tflops == pytest.approx(0.128)
    assert found.calls_per_case == 5  # the check, 3 warm-up calls, one sample
    assert found.compute_s == pytest.approx((64e12 + 1e3) * 5 / 0.128e12)  # 2500 s: FLOPs at the peak
    assert found.heaviest.case_id == "fake-64000000000" and found.largest.case_id == "fake-1"
    assert found.largest.memory_bytes == 3e9  # declared; else the compulsory traffic (bytes_moved)
    assert found.worth_naming and not found.cannot_fit
    words = cost.describe(found, "fp32")
    assert words.startswith("at least 41:40 of compute for each backend that runs (2 cases x 5 calls")
    assert "at least 3.0 GB (2.8 GiB) of memory for fake-1 of this machine's 25.3 GB (23.6 GiB)" in words


def test_small_runs_say_nothing_and_what_cannot_fit_is_named():
    small = cost.run_cost(_phases(FakeCase(1)), CPU, "fp32", warmup_min_iters=3)
    assert not small.worth_naming and not small.cannot_fit
    big = cost.run_cost(_phases(Held(1, held=26.1e9)), CPU, "fp32", warmup_min_iters=3)
    assert big.cannot_fit and big.worth_naming
    assert cost.refusal(big, "fp32") == (
        "fake-1 cannot fit in this machine's memory: it needs at least 26.1 GB (24.3 GiB), the inputs, outputs and "
        "state one backend holds at once; this machine has 25.3 GB (23.6 GiB). Allowed: sizes whose largest case "
        "fits")
    unknown = cost.run_cost(_phases(FakeCase(1)), replace(CPU, cpu={"flags": []}), "fp32", warmup_min_iters=3)
    assert unknown.compute_s is None and "its compute is not estimated here" in cost.describe(unknown, "fp32")
    assert cost.shrink("transformer", False) == ("Smaller here: scale=smoke (every workload's smoke sizes); or "
                                                 "model=tiny")


def test_the_1b_training_step_cannot_fit_in_23_5_gib():
    """16 bytes a parameter (fp32 weights, gradients, AdamW's two moments) and the bf16 logits: 26.1 GB."""
    from xmfu.harness.engine.structured import parse_section
    from xmfu.workloads.transformer.cases import expand
    from xmfu.workloads.transformer.spec import ModelSpec

    model = {"name": "1b", "vocab": 128256, "d_model": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8,
             "ffn_hidden": 8192, "seq_len": 2048, "batch": 4, "rope_theta": 500000.0}
    case, = expand({"model": model}, "bf16", 0)
    assert parse_section("model", ModelSpec, model).param_counts()["total"] == 1_498_482_688
    assert case.memory_bytes() == 16 * 1_498_482_688 + 4 * 2048 * 128256 * 2
    found = cost.run_cost(_phases(case), CPU, "bf16", warmup_min_iters=3)
    assert found.cannot_fit


def _registry_of(case):
    """tests/test_run.py's fake workload and backend, with `case` as its one case."""
    from xmfu.harness.engine.registry import Registry, WorkloadDef

    registry = Registry()
    registry.add(WorkloadDef("fake", lambda cfg, dtype, seed: [case], _registry().workload("fake").implementations))
    return registry


def test_a_run_that_cannot_fit_is_refused_before_any_bundle_and_a_large_one_is_named(tmp_path, capsys, monkeypatch):
    from xmfu.harness import run as run_module
    from xmfu.harness.machine.platform import Platform

    monkeypatch.setattr(run_module, "detect", lambda *a, **k: Platform("cpu", (CPU,), "test"))
    with pytest.raises(SetupError, match=r"^fake-1 cannot fit in this machine's memory: it needs at least 1000000.0 "
                                         r"GB .* Smaller here: scale=smoke \(every workload's smoke sizes\)$"):
        _run(tmp_path, _registry_of(Held(1, held=1e15)), "refused")
    assert not (tmp_path / "refused").exists()
    outcome = _run(tmp_path, _registry_of(FakeCase(10**12)), "named")  # 1e15 FLOPs a call (FakeCase: 1e3 x size)
    err = capsys.readouterr().err
    # Named, then run: the fake's microsecond call claiming 1e15 FLOPs lies below the roofline, so its row fails as
    # faster than the roofline (exit 1); what matters here is the warning before the start and the bundle.
    assert outcome.exit_code == 1 and outcome.bundle is not None and outcome.bundle.exists()
    assert ("xmfu: sizes meant for an accelerator: at least 6:30:38 of compute for each backend that runs (1 case x 3 "
            "calls") in err  # 3 x 1e15 FLOPs at 0.128 TFLOP/s
