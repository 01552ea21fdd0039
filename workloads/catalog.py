"""The allow-list of built-in workloads and backends: the one place that knows them all.

Adding a backend is adding its module and one line here. Backends are named by module path and imported on first
use (xmfu.harness.engine.registry.Lazy): their modules import torch, JAX or Triton at the top, and a run imports only
the frameworks of the backends it chooses. The specs (sizes, FLOP formulas, config checks) import no framework and
are loaded now, because validating a config needs them. `frameworks` tells platform detection what to ask.
"""

from __future__ import annotations

from xmfu.harness.engine.registry import Implementation, Lazy, Registry, WorkloadDef
from xmfu.workloads.attention import spec as attention_spec
from xmfu.workloads.collectives import spec as collectives_spec
from xmfu.workloads.collectives import summary as collectives_summary
from xmfu.workloads.grouped_matmul import spec as grouped_matmul_spec
from xmfu.workloads.inference import cases as inference_cases
from xmfu.workloads.inference import spec as inference_spec
from xmfu.workloads.matmul import spec as matmul_spec
from xmfu.workloads.membw import spec as membw_spec
from xmfu.workloads.transformer import cases as transformer_cases
from xmfu.workloads.transformer import figures as transformer_figures
from xmfu.workloads.transformer import spec as transformer_spec

# Triton backends count as torch: xmfu's Triton kernels take torch's tensors on torch's device.
TORCH, JAX = ("torch",), ("jax",)


SDPA, JAX_ATTENTION = "xmfu.workloads.attention.torch_sdpa", "xmfu.workloads.attention.jax"


# Backends whose preparation on a CPU takes tens of seconds per case (measured on this project's 2-core machine:
# Inductor's start-up and C++ compile, 1-32 s per case; Pallas' interpreted program, 3-13 s per case). A CPU run
# is the plumbing check (make bench, experiment=smoke): there they run when named, and `backends: null` skips them
# with the reason. On an accelerator they are in the default set like every other.
INDUCTOR_ON_CPU = "Inductor compiles each case on a CPU: tens of seconds"
PALLAS_ON_CPU = "Pallas' interpreter compiles each case on a CPU: seconds to tens of seconds"
HELION_ON_CPU = "Helion compiles each shape for Triton's interpreter on a CPU: about 10 s"


def _impl(backend: str, module: str, frameworks: tuple[str, ...], cpu_when_named: str = "") -> Implementation:
    """A backend whose module has `available` and `prepare`. Full module paths, written out: tests/test_layout.py
    counts them as imports."""
    return Implementation(backend, Lazy(module, "available"), Lazy(module, "prepare"), frameworks,
                          cpu_when_named=cpu_when_named)


def _sdpa(backend: str, kernel: str) -> Implementation:
    """torch SDPA with `kernel` forced ("auto": torch chooses)."""
    return Implementation(backend, Lazy(SDPA, "available"), Lazy(SDPA, "make_prepare", (kernel,)), TORCH)


def _jax_attention(backend: str, implementation: str) -> Implementation:
    """jax.nn.dot_product_attention with `implementation` ("xla" or "cudnn")."""
    return Implementation(backend, Lazy(JAX_ATTENTION, "make_available", (implementation,)),
                          Lazy(JAX_ATTENTION, "make_prepare", (implementation,)), JAX)


def build_registry() -> Registry:
    registry = Registry()
    registry.add(WorkloadDef("matmul", matmul_spec.expand, {
        "torch": _impl("torch", "xmfu.workloads.matmul.torch", TORCH),
        "triton": _impl("triton", "xmfu.workloads.matmul.triton", TORCH),
        "triton_persistent": _impl("triton_persistent", "xmfu.workloads.matmul.triton_persistent", TORCH),
        "jax": _impl("jax", "xmfu.workloads.matmul.jax", JAX),
        "jax_pallas": _impl("jax_pallas", "xmfu.workloads.matmul.jax_pallas", JAX, PALLAS_ON_CPU),
        "torch_compile": _impl("torch_compile", "xmfu.workloads.matmul.torch_compile", TORCH, INDUCTOR_ON_CPU),
        "helion": _impl("helion", "xmfu.workloads.matmul.helion", TORCH, HELION_ON_CPU),
    }, for_device=matmul_spec.for_device, settings=matmul_spec.MatmulSettings))
    registry.add(WorkloadDef("grouped_matmul", grouped_matmul_spec.expand, {
        "torch": _impl("torch", "xmfu.workloads.grouped_matmul.torch", TORCH),
        "triton": _impl("triton", "xmfu.workloads.grouped_matmul.triton", TORCH),
        "jax": _impl("jax", "xmfu.workloads.grouped_matmul.jax", JAX),
    }, settings=grouped_matmul_spec.GroupedMatmulSettings))
    registry.add(WorkloadDef("attention", attention_spec.expand, {
        "torch_sdpa": _sdpa("torch_sdpa", "auto"),
        "torch_sdpa_flash": _sdpa("torch_sdpa_flash", "flash"),
        "torch_sdpa_efficient": _sdpa("torch_sdpa_efficient", "efficient"),
        "torch_sdpa_cudnn": _sdpa("torch_sdpa_cudnn", "cudnn"),
        "torch_sdpa_math": _sdpa("torch_sdpa_math", "math"),
        "torch_eager": _impl("torch_eager", "xmfu.workloads.attention.torch_eager", TORCH),
        "triton": _impl("triton", "xmfu.workloads.attention.triton", TORCH),
        "triton_fa2": _impl("triton_fa2", "xmfu.workloads.attention.triton_fa2", TORCH),
        "jax": _jax_attention("jax", "xla"),
        "jax_cudnn": _jax_attention("jax_cudnn", "cudnn"),
        "jax_pallas": _impl("jax_pallas", "xmfu.workloads.attention.jax_pallas", JAX, PALLAS_ON_CPU),
        "torch_flex": _impl("torch_flex", "xmfu.workloads.attention.torch_flex", TORCH, INDUCTOR_ON_CPU),
        "flash_attn": _impl("flash_attn", "xmfu.workloads.attention.flash_attn", TORCH),
        "aiter": _impl("aiter", "xmfu.workloads.attention.amd_aiter", TORCH),
        "helion": _impl("helion", "xmfu.workloads.attention.helion", TORCH, HELION_ON_CPU),
    }, settings=attention_spec.AttentionSettings))
    registry.add(WorkloadDef("transformer", transformer_cases.expand, {
        "torch": _impl("torch", "xmfu.workloads.transformer.torch", TORCH),
        "torch_compile": _impl("torch_compile", "xmfu.workloads.transformer.torch_compile", TORCH),
        "torch_triton": _impl("torch_triton", "xmfu.workloads.transformer.torch_triton", TORCH),
        "jax": _impl("jax", "xmfu.workloads.transformer.jax", JAX),
    }, derive=transformer_figures.derive, settings=transformer_spec.TransformerSettings))
    registry.add(WorkloadDef("inference", inference_cases.expand, {
        "torch": _impl("torch", "xmfu.workloads.inference.torch", TORCH),
        "torch_compile": _impl("torch_compile", "xmfu.workloads.inference.torch_compile", TORCH),
        "torch_triton": _impl("torch_triton", "xmfu.workloads.inference.torch_triton", TORCH),
        "jax": _impl("jax", "xmfu.workloads.inference.jax", JAX),
    }, settings=inference_spec.InferenceSettings))
    registry.add(WorkloadDef("membw", membw_spec.expand, {
        "torch": _impl("torch", "xmfu.workloads.membw.torch", TORCH),
        "triton": _impl("triton", "xmfu.workloads.membw.triton", TORCH),
        "jax": _impl("jax", "xmfu.workloads.membw.jax", JAX),
    }, summarize=membw_spec.summarize, settings=membw_spec.MembwSettings))
    registry.add(WorkloadDef("collectives", collectives_spec.expand, {
        "torch_dist": _impl("torch_dist", "xmfu.workloads.collectives.torch_dist", TORCH),
        "jax": _impl("jax", "xmfu.workloads.collectives.jax", JAX),
    }, summarize=collectives_summary.summarize, settings=collectives_spec.CollectivesSettings))
    return registry
