"""xmfu's Triton FlashAttention at the published structure (kernels/flash_attention_fa2.py): the forward's key blocks
split into unmasked ones and the masked diagonal band (Triton tutorial 06's stages), EVEN_M/EVEN_N specialisations,
the delta preprocessing in Triton and a 5-GEMM backward with an atomic dQ (FlashAttention-2). It runs beside
`triton` (kernels/flash_attention.py: the same split forward without the EVEN specialisations, a deterministic
backward of 7 GEMMs per block pair) so one GPU run measures the two; every shape, one query token included, runs
the tiled kernel here. The checks, refusals and the interpreter's smaller case are the `triton` backend's
(workloads/attention/triton.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.triton import available, prepare_interpreted

__all__ = ["available", "prepare"]

KERNEL = ("forward: unmasked key blocks, then the masked diagonal band; EVEN_M/EVEN_N specialised; backward: delta "
          "kernel, then dK/dV per key block with dQ added atomically (5 GEMMs per block pair)")


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    return prepare_interpreted(case, ctx, _attend)


def _attend(checked: AttentionCase) -> tuple[Callable, dict[str, Any]]:
    import triton

    from xmfu.kernels.flash_attention_fa2 import flash_attention

    def attend(q, k, v):
        return flash_attention(q, k, v, checked.causal, checked.causal_offset, checked.scale)

    return attend, {"library": "xmfu.kernels.flash_attention_fa2 (Triton)",
                    "library_version": f"triton {triton.__version__}", "kernel": KERNEL}
