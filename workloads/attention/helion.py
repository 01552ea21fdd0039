"""Helion (pytorch/helion) attention forward: examples/attention.py's kernel (xmfu.kernels.helion_kernels), with the
scale, GQA and both causal alignments the workload needs. Optional: the extra `helion` installs it. Forward only:
helion's example has no backward kernel, and timing torch's autograd around it would not be Helion's backward.

On a CPU it runs in Triton's interpreter at a reduced case (attention/triton.py's interpreter_case), for
correctness. The interpreter runs no libdevice function (triton 3.9's `triton.language.extra.libdevice` functions
are stubs outside a compiled kernel: `libdevice.exp2` returns None there, "'NoneType' object has no attribute
'dtype'"), and Helion lowers torch.exp2 to libdevice.exp2 and torch.exp to libdevice.exp unless Inductor's
use_fast_math is set (torch 2.13 torch/_inductor/codegen/triton.py TritonOverrides.exp: `tl_math.exp` with
use_fast_math, else `libdevice.exp`). So in the interpreter the kernel uses exp, compiled with use_fast_math for
that one compile; on a GPU it keeps the example's exp2 and Inductor's defaults.
"""

from __future__ import annotations

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, torch_unavailable
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_modes import prepare_torch
from xmfu.workloads.attention.triton import checked_note, interpreter_case
from xmfu.workloads.helion_support import (
    helion_settings,
    helion_unavailable,
    kernel_config,
    notes_for,
    refusal,
)

DTYPES = ("fp32", "bf16", "fp16")
INTERPRETER_BLOCKS = [1, 32, 32]  # batch·kv-heads, query rows, keys


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    why = helion_unavailable(ctx.platform.kind) or torch_unavailable(case.dtype, ctx.platform.kind, ctx.device.arch)
    if not why and case.mode != "fwd":
        why = ("helion's attention (examples/attention.py) is forward-only: no backward kernel to time for mode "
               f"{case.mode}")
    why = why or refusal(case.dtype, DTYPES, ctx.platform.kind, "Helion attention")
    return (False, why) if why else (True, "")


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    why = helion_unavailable(ctx.platform.kind)
    if why:
        raise Unavailable(why)
    if case.mode != "fwd":
        raise Unavailable(f"helion's attention is forward-only, not {case.mode}")
    from xmfu.kernels import helion_kernels

    on_cpu = ctx.platform.kind == "cpu"
    checked = interpreter_case(case) if on_cpu else case
    # fp32 dots in ieee (helion's default for fp32 is tf32: runtime/settings.py _get_dot_precision)
    settings = helion_settings(on_cpu, INTERPRETER_BLOCKS, "ieee" if checked.dtype == "fp32" else None)
    kernel = helion_kernels.compile_kernel(helion_kernels.attention, settings)
    base2 = not on_cpu
    qk_scale = checked.scale * (helion_kernels.LOG2E if base2 else 1.0)
    # every key visible: an offset past the last key
    offset = checked.causal_offset if checked.causal else checked.seq_kv
    b, kvh, g, sq, skv, d = (checked.batch, checked.kv_heads, checked.group, checked.seq_q, checked.seq_kv,
                             checked.head_dim)
    args: list = []

    def attend(q, k, v):
        # a group's query heads share one kv head: their rows, stacked, are one (G·S, D) block (a view)
        x = (q.reshape(b * kvh, g * sq, d), k.reshape(b * kvh, skv, d), v.reshape(b * kvh, skv, d))
        args[:] = [*x, sq, offset, qk_scale, base2]
        return kernel(*args).reshape(b, kvh * g, sq, d)

    mask = "none" if not checked.causal else f"causal, offset {checked.causal_offset} ({checked.alignment})"
    notes = {**notes_for(settings, on_cpu), "kernel": "helion examples/attention.py forward (online softmax, "
             f"{'exp2' if base2 else 'exp: the interpreter has no libdevice'})", "mask": mask, "interpreter": on_cpu}
    note = (TRITON_INTERPRETER_NOTE if on_cpu else "") + checked_note(case, checked, "hours")
    prepared = prepare_torch(checked, ctx, attend, notes, timing_valid=not on_cpu, timing_note=note)
    warm = prepared.fn
    if on_cpu:  # compile now, with exp lowered to tl_math.exp (see above)
        import torch._inductor.config as inductor_config

        with inductor_config.patch(use_fast_math=True):
            warm()
    else:
        warm()
    notes["config"] = kernel_config(kernel, tuple(args))
    prepared.notes.update(config=notes["config"])
    if checked is not case:
        prepared.check_case = checked
    return prepared
