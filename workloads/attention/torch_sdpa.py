"""torch.nn.functional.scaled_dot_product_attention, with its sub-backend chosen or recorded.

`auto` lets torch choose and records the kernel it ran (from the profiler's op names); `flash`, `efficient`,
`cudnn` and `math` force one, and one the platform lacks is skipped with torch's reason. Forcing costs a
`sdpa_kernel` context switch per call, a few microseconds of host time: hidden behind a GPU's queue, but
visible against tiny synchronous CPU calls (compare `auto` with the forced kernel it chose).
"""

from __future__ import annotations

from collections.abc import Callable

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_modes import prepare_torch

SUB_BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")
OP_NAMES = {  # aten op -> sub-backend, to record what `auto` picked
    "_scaled_dot_product_flash_attention": "flash", "_scaled_dot_product_flash_attention_for_cpu": "flash",
    "_scaled_dot_product_efficient_attention": "efficient", "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_attention_math": "math", "_scaled_dot_product_fused_attention_overrideable": "fused",
}


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind, ctx.device.arch)
    return (False, why) if why else (True, "")


def _attend(case: AttentionCase, sub: str) -> Callable:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    kwargs = {"scale": case.scale, "enable_gqa": case.group > 1}
    if case.causal and case.causal_offset == 0:
        kwargs["is_causal"] = True  # top-left, which is also bottom-right when seq_q == seq_kv
    elif case.causal:
        kwargs["attn_mask"] = causal_lower_right(case.seq_q, case.seq_kv)
    if sub == "auto":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwargs)
    chosen = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[sub]

    def attend(q, k, v):
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)

    return attend


def _kernel_used(attend: Callable, case: AttentionCase, device: str) -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from xmfu.harness.machine.frameworks import quiet_torch_profiler, to_torch

    quiet_torch_profiler()
    # Inputs that need gradients in backward modes: torch may pick another kernel when it must save for them.
    grad = case.mode != "fwd"
    x = {n: to_torch(a, case.dtype, device).requires_grad_(grad) for n, a in case.inputs().items()}
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.set_grad_enabled(grad):
        attend(x["q"], x["k"], x["v"])
    names = {e.key.removeprefix("aten::") for e in prof.key_averages()}
    return next((OP_NAMES[n] for n in OP_NAMES if n in names), "unknown")


def make_prepare(sub: str) -> Callable[[AttentionCase, RunContext], Prepared]:
    def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
        attend = _attend(case, sub)
        try:
            used = _kernel_used(attend, case, ctx.torch_device)
        except RuntimeError as exc:
            if "No viable backend" in str(exc) or "No available kernel" in str(exc):
                raise Unavailable(f"SDPA {sub} kernel is not available for this case on "
                                  f"{ctx.platform.kind}: {str(exc).splitlines()[0][:200]}") from None
            raise
        notes = {"library": "torch scaled_dot_product_attention", "sdpa_backend_requested": sub,
                 "sdpa_backend_used": used}
        return prepare_torch(case, ctx, attend, notes)

    return prepare
