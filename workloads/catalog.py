"""The allow-list of built-in workloads and backends: the one place that knows them all.

Adding a backend is adding its module and one line here.
"""

from __future__ import annotations

from harness.engine.registry import Implementation, Registry, WorkloadDef
from workloads.attention import jax as attention_jax
from workloads.attention import spec as attention_spec
from workloads.attention import torch_eager as attention_eager
from workloads.attention import torch_sdpa as attention_sdpa
from workloads.attention import triton as attention_triton
from workloads.collectives import jax as collectives_jax
from workloads.collectives import spec as collectives_spec
from workloads.collectives import summary as collectives_summary
from workloads.collectives import torch_dist as collectives_torch
from workloads.matmul import jax as matmul_jax
from workloads.matmul import spec as matmul_spec
from workloads.matmul import torch as matmul_torch
from workloads.matmul import triton as matmul_triton
from workloads.transformer import cases as transformer_cases
from workloads.transformer import figures as transformer_figures
from workloads.transformer import jax as transformer_jax
from workloads.transformer import torch as transformer_torch
from workloads.transformer import torch_compile as transformer_compile
from workloads.transformer import torch_triton as transformer_triton


def _impl(backend: str, module) -> Implementation:
    return Implementation(backend, module.available, module.prepare)


def build_registry() -> Registry:
    registry = Registry()
    registry.add(WorkloadDef("matmul", matmul_spec.expand, {
        "torch": _impl("torch", matmul_torch),
        "triton": _impl("triton", matmul_triton),
        "jax": _impl("jax", matmul_jax),
    }, for_device=matmul_spec.for_device))
    registry.add(WorkloadDef("attention", attention_spec.expand, {
        "torch_sdpa": Implementation("torch_sdpa", attention_sdpa.available, attention_sdpa.make_prepare("auto")),
        "torch_sdpa_flash": Implementation("torch_sdpa_flash", attention_sdpa.available,
                                           attention_sdpa.make_prepare("flash")),
        "torch_sdpa_efficient": Implementation("torch_sdpa_efficient", attention_sdpa.available,
                                               attention_sdpa.make_prepare("efficient")),
        "torch_sdpa_cudnn": Implementation("torch_sdpa_cudnn", attention_sdpa.available,
                                           attention_sdpa.make_prepare("cudnn")),
        "torch_sdpa_math": Implementation("torch_sdpa_math", attention_sdpa.available,
                                          attention_sdpa.make_prepare("math")),
        "torch_eager": _impl("torch_eager", attention_eager),
        "triton": _impl("triton", attention_triton),
        "jax": Implementation("jax", attention_jax.make_available("xla"), attention_jax.make_prepare("xla")),
        "jax_cudnn": Implementation("jax_cudnn", attention_jax.make_available("cudnn"),
                                    attention_jax.make_prepare("cudnn")),
    }))
    registry.add(WorkloadDef("transformer", transformer_cases.expand, {
        "torch": _impl("torch", transformer_torch),
        "torch_compile": _impl("torch_compile", transformer_compile),
        "torch_triton": _impl("torch_triton", transformer_triton),
        "jax": _impl("jax", transformer_jax),
    }, derive=transformer_figures.derive))
    registry.add(WorkloadDef("collectives", collectives_spec.expand, {
        "torch_dist": _impl("torch_dist", collectives_torch),
        "jax": _impl("jax", collectives_jax),
    }, summarize=collectives_summary.summarize))
    return registry
