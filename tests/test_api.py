"""xmfu.benchmark picks its timer from where the work runs, not from what the callable happens to return."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import gpu_device, run_config
from xmfu.harness.api import CallableCase, _implementation
from xmfu.harness.engine.case import Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timers import timer_for
from xmfu.harness.machine.platform import Platform


class CudaTensor:
    """What the timer choice looks at on a torch CUDA/ROCm tensor (both report is_cuda=True)."""

    is_cuda = True


CASE = CallableCase("k", "fp32", 1.0, 0.0, 1e-2, np.zeros(1))


def _ctx(kind: str) -> RunContext:
    device = gpu_device("NVIDIA H100 80GB HBM3", 132) if kind != "cpu" else gpu_device("cpu", kind="cpu")
    return RunContext(run_config(), Platform(kind, (device,), "test"))


@pytest.fixture
def torch_sees_a_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.parametrize("output", [CudaTensor(), (CudaTensor(), CudaTensor()), [CudaTensor()],
                                    {"out": CudaTensor(), "aux": (1, CudaTensor())}, None, 3.5],
                         ids=["tensor", "tuple", "list", "dict", "None", "float"])
def test_gpu_work_is_timed_with_device_events_whatever_it_returns(torch_sees_a_gpu, output):
    prepared = _implementation("c", lambda: output).prepare(CASE, _ctx("cuda"))
    assert prepared.framework == "torch" and prepared.timing_valid
    assert timer_for(prepared.framework, "cuda").name == "torch.cuda.Event"  # synchronizes before it starts


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_jax_arrays_anywhere_in_the_output_are_waited_on(kind):
    import jax.numpy as jnp

    x = jnp.ones(4)
    for output in (x, (x, x), {"a": [x]}):
        prepared = _implementation("c", lambda o=output: o).prepare(CASE, _ctx(kind))
        assert prepared.framework == "jax", output


def test_cuda_outputs_on_a_cpu_run_are_refused():
    with pytest.raises(Unavailable, match="device='cpu'"):
        _implementation("c", lambda: (CudaTensor(),)).prepare(CASE, _ctx("cpu"))


def test_gpu_work_with_nothing_to_wait_on_is_checked_not_timed(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a JAX-only GPU machine
    prepared = _implementation("c", lambda: None).prepare(CASE, _ctx("cuda"))
    assert not prepared.timing_valid and "JAX arrays" in prepared.timing_note


def test_host_work_on_a_cpu_run_uses_the_host_timer():
    prepared = _implementation("c", lambda: np.ones(3)).prepare(CASE, _ctx("cpu"))
    assert prepared.framework == "host" and prepared.timing_valid


@pytest.mark.parametrize(("output", "reason"), [
    (lambda: float("nan") * np.ones(4), "4 of 4 values are NaN or infinite"),
    (lambda: None, "the candidate returned None"),
    (lambda: np.ones(3), "shape (3,) vs reference (4,)"),
    (lambda: "not a tensor", "the output is not numbers"),
])
def test_a_bad_result_is_incorrect_and_the_run_goes_on(tmp_path, output, reason):
    import xmfu

    result = xmfu.benchmark({"bad": output, "good": lambda: np.ones(4)}, reference=np.ones(4), flops=4.0,
                            results_dir=str(tmp_path), timing={"max_time_s": 0.3, "warmup_s": 0.0}, device="cpu")
    rows = {r["backend"]: r for r in result.rows}
    assert rows["bad"]["status"] == "incorrect" and reason in rows["bad"]["reason"]
    assert rows["good"]["status"] == "ok"
    from xmfu.harness.results.bundle.validator import validate_bundle

    assert validate_bundle(result.bundle) == []  # strict JSON: the infinite error became null, and is said


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"flops": 0}, "flops: 0 is not usable"), ({"flops": -5}, "flops"), ({"flops": "many"}, "flops"),
    ({"tolerance": -1}, "tolerance: -1 is not usable"), ({"bytes_moved": float("inf")}, "bytes_moved"),
    ({"name": 7}, "name: 7 is not usable"), ({"name": ""}, "name: '' is not usable"),
    ({"candidates": {"a": np.ones(2)}}, r"candidates\['a'\]: ndarray is not callable"),
    ({"candidates": {3: lambda: np.ones(2)}}, "candidates: the name 3 is not usable"),
    ({"candidates": {}}, "candidates: dict is not usable"), ({"candidates": [lambda: 1]}, "candidates: list"),
])
def test_bad_api_arguments_name_the_argument(tmp_path, kwargs, needle):
    import xmfu

    candidates = kwargs.pop("candidates", {"a": lambda: np.ones(2)})
    with pytest.raises(ValueError, match=needle):
        xmfu.benchmark(candidates, reference=np.ones(2), results_dir=str(tmp_path), **kwargs)
    assert not any(tmp_path.iterdir())  # refused up front: no bundle was begun


@pytest.mark.parametrize("when", ["first call", "while timing"])
def test_sys_exit_inside_a_candidate_is_that_candidates_failure(tmp_path, when):
    import sys

    import xmfu

    calls = {"n": 0}

    def exits():
        calls["n"] += 1
        if when == "first call" or calls["n"] > 5:  # the check's calls pass; the timed ones then exit
            sys.exit(3)
        return np.ones(4)

    result = xmfu.benchmark({"exits": exits, "good": lambda: np.ones(4)}, reference=np.ones(4), flops=4.0,
                            results_dir=str(tmp_path), timing={"max_time_s": 0.3, "warmup_s": 0.0}, device="cpu")
    rows = {r["backend"]: r for r in result.rows}
    reason = "the backend called sys.exit(3)" if when == "first call" else "SystemExit during warm-up: 3"
    assert rows["exits"]["status"] == "failed" and reason in rows["exits"]["reason"]
    assert rows["good"]["status"] == "ok"


def _raises():
    raise RuntimeError("the reference kernel is broken")


@pytest.mark.parametrize(("reference", "needle"), [
    (_raises, "reference: calling it raised RuntimeError: the reference kernel is broken. Allowed: a callable"),
    (lambda: None, "reference: it returned None or non-finite values"),
    (np.array([1.0, np.nan]), "reference: it returned None or non-finite values"),
    ("abc", "reference: the output is not numbers"),
])
def test_a_reference_that_raises_or_gives_no_numbers_is_the_documented_refusal(tmp_path, reference, needle):
    """issue 42 item 16: a reference callable that raised came through as its own error (a RuntimeError)."""
    import xmfu

    with pytest.raises(ValueError, match=needle):
        xmfu.benchmark({"a": lambda: np.ones(2)}, reference=reference, results_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())
