"""FlexAttention (torch.nn.attention.flex_attention) compiled by torch.compile: Inductor's flex_attention template,
in Triton on GPUs (its flex_decoding template for short queries, its backward template for the gradients) and in C++
on a CPU. A causal case passes a BlockMask from create_block_mask, so fully masked blocks are skipped; a full one
passes none. GQA through enable_gqa. The row records torch's version, the templates Inductor offered and the kernels
the compiled code calls (harness/machine/inductor.py); compiling is set-up, not timed.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import inductor
from xmfu.harness.machine.compat import release
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_modes import prepare_torch

# torch 2.13 torch/nn/attention/flex_attention.py, _validate_device: on a CPU any q/k/v with requires_grad raises
# NotImplementedError("FlexAttention does not support backward on CPU. ..."); Inductor's CPU lowering is inference
# only (torch/_inductor/kernel/flex/flex_cpu.py lower_cpu: "torch.compile on CPU only supports inference").
CPU_NO_BACKWARD = ("FlexAttention does not support backward on CPU (torch.nn.attention.flex_attention "
                   "_validate_device); only mode=fwd runs on a CPU")
# torch/_inductor/kernel/flex/flex_attention.py, flex_attention lowering: "NYI: embedding dimension of the query,
# key, and value must be at least 16" on GPUs (tl.dot's smallest tile).
MIN_GPU_HEAD_DIM = 16


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    kind = ctx.platform.kind
    why = torch_unavailable(case.dtype, kind, ctx.device.arch)
    if why:
        return False, why
    if importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
        return False, "this torch has no FlexAttention (torch.nn.attention.flex_attention, torch 2.5 and later)"
    why = inductor.cpp_compiler_missing(kind)
    if why:
        return False, why
    if kind == "cpu" and case.mode != "fwd":
        return False, CPU_NO_BACKWARD
    if kind in ("cuda", "rocm") and case.head_dim < MIN_GPU_HEAD_DIM:
        return False, f"FlexAttention's GPU template needs head_dim >= {MIN_GPU_HEAD_DIM} (this case: {case.head_dim})"
    return True, ""


def _cpu_unsupported(torch: Any, dtype: str) -> str | None:
    """Inductor's CPU FlexAttention lowering refuses a machine without AVX2 (check_cpu_supported: AVX2 and
    ATEN_CPU_CAPABILITY not "default", no XPU, not macOS; "torch.compile on current platform is not supported for
    CPU"). torch 2.13 keeps it in torch/_inductor/kernel/flex/flex_cpu.py, torch 2.6.0 in kernel/flex_attention.py,
    whose lower_cpu also takes fp32 and bf16 only ("`torch.float` and `torch.bfloat16` are supported in
    FlexAttention for CPU device")."""
    # Inductor's lowering module first: it imports the kernel modules in their order (`from . import kernel`,
    # import_submodule(kernel)). On torch 2.6 importing a kernel module before it stops in a circular import
    # (codegen/cpp_gemm_template.py) that leaves flex_attention without its lowering ("flex_attention is not an
    # OpOverload" when compiled).
    importlib.import_module("torch._inductor.lowering")

    try:
        from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported
    except ImportError:  # torch 2.6: no flex/ package
        from torch._inductor.kernel.flex_attention import check_cpu_supported
    if release(torch.__version__)[:2] <= (2, 6) and dtype not in ("fp32", "bf16"):
        return (f"torch {torch.__version__}'s CPU FlexAttention takes fp32 and bf16 only "
                f"(torch/_inductor/kernel/flex_attention.py lower_cpu); this case is {dtype}")
    return None if check_cpu_supported() else ("Inductor's CPU FlexAttention needs AVX2 on Linux/Windows "
                                                "(torch._inductor check_cpu_supported)")


def block_mask(case: AttentionCase, device: str) -> Any:
    """None for a full case; for a causal one, the BlockMask of `kv <= q + causal_offset` (top-left: 0; bottom-right:
    seq_kv - seq_q), the rule spec.py's reference applies."""
    if not case.causal:
        return None
    from torch.nn.attention.flex_attention import create_block_mask

    offset = case.causal_offset

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return create_block_mask(causal, None, None, case.seq_q, case.seq_kv, device=device)


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    if ctx.platform.kind == "cpu":
        why = _cpu_unsupported(torch, case.dtype)
        if why:
            raise Unavailable(why)
    compiled = inductor.compiled_with(torch, flex_attention, dynamic=False)
    mask = block_mask(case, ctx.torch_device)
    gqa = case.group > 1

    def attend(q, k, v):
        return compiled(q, k, v, block_mask=mask, scale=case.scale, enable_gqa=gqa)

    with inductor.record() as rec:
        prepared = prepare_torch(case, ctx, attend, {})  # mode bwd runs its forward here
        prepared.fn()  # compiles the timed pass: set-up, not timed
    prepared.notes.update(flex_notes(rec, torch.__version__, mask))
    return prepared


def flex_notes(rec: inductor.CompileRecord, version: str, mask: Any) -> dict[str, Any]:
    templates = sorted({re.sub(r"_\d+$", "", n) for names in rec.offered_names for n in names if n})
    return {"library": "torch.nn.attention.flex_attention under torch.compile (Inductor)", "torch_version": version,
            "block_mask": None if mask is None else f"causal, block size {tuple(mask.BLOCK_SIZE)}",
            "flex_templates": templates or "not lowered here (Inductor's FX graph cache answered)",
            "compiled_kernels": rec.kernels() or "none found in the compiled code",
            "compile_s": round(rec.compile_s, 3)}
