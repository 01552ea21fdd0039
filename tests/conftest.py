"""Shared fixtures. Triton's interpreter must be chosen before triton is first imported."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from harness.config import parse_run_config
from harness.engine.context import RunContext
from harness.machine.platform import DeviceInfo, Platform, cpu_device

QUICK_TIMING = {"warmup_s": 0.0, "warmup_min_iters": 1, "min_samples": 3, "max_samples": 6, "round_samples": 3,
                "target_rel_ci": 0.5, "max_time_s": 1.0, "bootstrap_resamples": 100}


def run_config(**overrides):
    data = {"workload": {"name": "matmul", "sizes": [64]}, "backends": ["torch"], "dtype": "fp32",
            "timing": dict(QUICK_TIMING), "mamf": {}}
    data.update(overrides)
    return parse_run_config(data, {"matmul": ["torch", "triton", "jax"], "fake": ["good", "bad", "absent",
                                                                                 "wrong"]})


@pytest.fixture
def cpu_ctx() -> RunContext:
    return RunContext(run_config(), Platform("cpu", (cpu_device(),), "test"))


def gpu_device(name: str, sms: int | None = None, memory_gb: float = 80, **kw) -> DeviceInfo:
    return DeviceInfo(kind=kw.pop("kind", "cuda"), name=name, vendor=kw.pop("vendor", "nvidia"),
                      memory_bytes=int(memory_gb * 1e9), multiprocessors=sms, **kw)
