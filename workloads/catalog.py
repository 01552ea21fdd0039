"""The allow-list of built-in workloads and backends: the one place that knows them all.

Adding a backend is adding its module and one line here. Backends are named by module path and imported on first
use (harness.engine.registry.Lazy): their modules import torch, JAX or Triton at the top, and a run imports only
the frameworks of the backends it chooses. The specs (sizes, FLOP formulas, config checks) import no framework and
are loaded now, because validating a config needs them. `frameworks` tells platform detection what to ask.
"""

from __future__ import annotations

from harness.engine.registry import Implementation, Lazy, Registry, WorkloadDef
from workloads.attention import spec as attention_spec
from workloads.collectives import spec as collectives_spec
from workloads.collectives import summary as collectives_summary
from workloads.matmul import spec as matmul_spec
from workloads.transformer import cases as transformer_cases

# Triton backends count as torch: xmfu's Triton kernels take torch's tensors on torch's device.
TORCH, JAX = ("torch",), ("jax",)


def _impl(backend: str, module: str, frameworks: tuple[str, ...]) -> Implementation:
    """A backend whose module (under workloads/) has `available` and `prepare`."""
    path = f"workloads.{module}"
    return Implementation(backend, Lazy(path, "available"), Lazy(path, "prepare"), frameworks)


def _sdpa(backend: str, kernel: str) -> Implementation:
    """torch SDPA with `kernel` forced ("auto": torch chooses)."""
    path = "workloads.attention.torch_sdpa"
    return Implementation(backend, Lazy(path, "available"), Lazy(path, "make_prepare", (kernel,)), TORCH)


def _jax_attention(backend: str, implementation: str) -> Implementation:
    """jax.nn.dot_product_attention with `implementation` ("xla" or "cudnn")."""
    path = "workloads.attention.jax"
    return Implementation(backend, Lazy(path, "make_available", (implementation,)),
                          Lazy(path, "make_prepare", (implementation,)), JAX)


def build_registry() -> Registry:
    registry = Registry()
    registry.add(WorkloadDef("matmul", matmul_spec.expand, {
        "torch": _impl("torch", "matmul.torch", TORCH),
        "triton": _impl("triton", "matmul.triton", TORCH),
        "jax": _impl("jax", "matmul.jax", JAX),
    }, for_device=matmul_spec.for_device))
    registry.add(WorkloadDef("attention", attention_spec.expand, {
        "torch_sdpa": _sdpa("torch_sdpa", "auto"),
        "torch_sdpa_flash": _sdpa("torch_sdpa_flash", "flash"),
        "torch_sdpa_efficient": _sdpa("torch_sdpa_efficient", "efficient"),
        "torch_sdpa_cudnn": _sdpa("torch_sdpa_cudnn", "cudnn"),
        "torch_sdpa_math": _sdpa("torch_sdpa_math", "math"),
        "torch_eager": _impl("torch_eager", "attention.torch_eager", TORCH),
        "triton": _impl("triton", "attention.triton", TORCH),
        "jax": _jax_attention("jax", "xla"),
        "jax_cudnn": _jax_attention("jax_cudnn", "cudnn"),
    }))
    registry.add(WorkloadDef("transformer", transformer_cases.expand, {
        "torch": _impl("torch", "transformer.torch", TORCH),
        "torch_compile": _impl("torch_compile", "transformer.torch_compile", TORCH),
        "torch_triton": _impl("torch_triton", "transformer.torch_triton", TORCH),
        "jax": _impl("jax", "transformer.jax", JAX),
    }))
    registry.add(WorkloadDef("collectives", collectives_spec.expand, {
        "torch_dist": _impl("torch_dist", "collectives.torch_dist", TORCH),
        "jax": _impl("jax", "collectives.jax", JAX),
    }, summarize=collectives_summary.summarize))
    return registry
