"""The allow-list of built-in workloads and backends: the one place that knows them all.

Adding a backend is adding its module and one line here.
"""

from __future__ import annotations

from harness.registry import Implementation, Registry, WorkloadDef
from workloads.matmul import jax as matmul_jax
from workloads.matmul import spec as matmul_spec
from workloads.matmul import torch as matmul_torch
from workloads.matmul import triton as matmul_triton


def _impl(backend: str, module) -> Implementation:
    return Implementation(backend, module.available, module.prepare)


def build_registry() -> Registry:
    registry = Registry()
    registry.add(WorkloadDef("matmul", matmul_spec.expand, {
        "torch": _impl("torch", matmul_torch),
        "triton": _impl("triton", matmul_triton),
        "jax": _impl("jax", matmul_jax),
    }))
    return registry
