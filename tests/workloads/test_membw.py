"""workload=membw: STREAM's kernels, counted as STREAM counts them, each backend checked on the CPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.conftest import refused_here
from xmfu.harness.engine.declare import ConfigError
from xmfu.workloads.membw import jax as jax_backend
from xmfu.workloads.membw import torch as torch_backend
from xmfu.workloads.membw import triton as triton_backend
from xmfu.workloads.membw.spec import MembwCase, expand, summarize

BACKENDS = {"torch": torch_backend, "jax": jax_backend, "triton": triton_backend}


def test_bytes_and_flops_are_streams():
    # stream.c 5.10: bytes[4] = {2, 2, 3, 3} * sizeof(STREAM_TYPE) * N; its table: 0, 1, 1, 2 FLOPs per element
    n = 1000
    assert [MembwCase(k, n, "fp32").bytes_moved() for k in ("copy", "scale", "add", "triad")] == [8e3, 8e3, 12e3, 12e3]
    assert [MembwCase(k, n, "bf16").flops() for k in ("copy", "scale", "add", "triad")] == [0, 1e3, 1e3, 2e3]


def test_expand_every_kernel_at_every_size_and_only_elementwise_dtypes():
    cases = expand({"name": "membw", "sizes": [64, 128], "kernels": ["triad", "copy"]}, "fp16", 0)
    assert [c.case_id for c in cases] == ["membw-fp16-triad-64", "membw-fp16-copy-64", "membw-fp16-triad-128",
                                          "membw-fp16-copy-128"]
    with pytest.raises(ConfigError, match="not a membw dtype"):
        expand({"name": "membw"}, "tf32", 0)


@pytest.mark.parametrize("backend", ["torch", "jax", "triton"])
@pytest.mark.parametrize("kernel", ["copy", "triad"])
def test_backend_matches_reference_and_takes_fresh_inputs(backend, kernel, cpu_ctx):
    case = MembwCase(kernel, 5003, "bf16")  # not a multiple of the Triton block: the masked tail runs
    module = BACKENDS[backend]
    # a stack without JAX, or an interpreter too old for xmfu's kernels, refuses every case (scripts/compat.sh)
    if backend != "torch" and (why := refused_here(backend)):
        assert module.available(case, cpu_ctx) == (False, why)
        pytest.skip(f"this stack cannot run it: {why}")
    assert module.available(case, cpu_ctx) == (True, "")
    prepared = module.prepare(case, cpu_ctx)
    assert case.check(prepared.result(case.check_rows())).ok
    fresh = replace(case, seed=7)
    prepared.fresh_inputs(fresh)
    out = prepared.result(None)
    assert fresh.check(out).ok and not case.check(out).ok  # the buffers now hold the new seed's inputs


def test_a_wrong_copy_is_caught_to_the_last_bit():
    case = MembwCase("copy", 100, "fp32")
    out = case.reference().copy()
    out[50] = np.nextafter(np.float32(out[50]), np.float32(2))
    assert not case.check(out).ok


def test_the_summary_is_the_best_timed_bandwidth():
    rows = [{"status": "ok", "timing_valid": True, "bandwidth_gbps": 10.0, "case_id": "a", "backend": "torch",
             "params": {"kernel": "copy"}, "roofline": {"peak_membw_gbps": 100.0}},
            {"status": "ok", "timing_valid": True, "bandwidth_gbps": 20.0, "case_id": "b", "backend": "jax",
             "params": {"kernel": "triad"}, "roofline": {"peak_membw_gbps": 100.0}},
            {"status": "ok", "timing_valid": False, "bandwidth_gbps": 99.0, "case_id": "c", "backend": "triton"}]
    s = summarize(rows)
    assert (s["achievable_gbps"], s["case_id"], s["kernel"], s["of_peak"]) == (20.0, "b", "triad", 0.2)
    assert summarize([])["achievable_gbps"] is None
