"""The backend xmfu runs: the contract of docs/backends.md, nothing more.

`workload` says which workload's cases it receives; `available` answers whether it can run a case here (a row
`skipped` with the reason when not); `prepare` returns the zero-argument callable xmfu times and how to read its
result for the correctness check against the fp64 reference. The kernel here is xmfu's own Triton FlashAttention
(xmfu.kernels.flash_attention), standing in for yours: replace `attend` with your kernel's call.

`xmfu.plugin.attention_call` (xmfu's public names for plug-ins) turns an `attend(q, k, v) -> out` function into
the callable for the case's mode (forward, backward, forward+backward), exactly as the built-in torch backends are
timed. On a CPU
Triton runs in its interpreter: the kernel is checked there, on a smaller case, and not timed.
"""

from __future__ import annotations

from typing import Any

from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, triton_unavailable
from xmfu.plugin import Prepared, attention_call
from xmfu.workloads.attention.triton import HEAD_DIMS, interpreter_case


class MyAttention:
    workload = "attention"
    frameworks = ("torch",)  # what it computes with: platform detection asks torch only

    def available(self, case: Any, ctx: Any) -> tuple[bool, str]:
        why = triton_unavailable(ctx.platform.kind)
        if why:
            return False, why
        if case.head_dim not in HEAD_DIMS:
            return False, f"my_attention: head_dim {case.head_dim} not supported; allowed: {HEAD_DIMS}"
        if case.dtype == "tf32":
            return False, "my_attention: tf32 is not offered"
        return True, ""

    def prepare(self, case: Any, ctx: Any) -> Prepared:
        from xmfu.kernels.flash_attention import flash_attention

        on_cpu = ctx.platform.kind == "cpu"
        checked = interpreter_case(case) if on_cpu else case  # the interpreter is too slow for large cases

        def attend(q: Any, k: Any, v: Any) -> Any:
            return flash_attention(q, k, v, checked.causal, checked.causal_offset, checked.scale)

        notes = {"library": "my_attention (xmfu.kernels.flash_attention, Triton)", "interpreter": on_cpu}
        prepared = attention_call(checked, ctx, attend, notes, timing_valid=not on_cpu,
                                  timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "")
        if checked is not case:
            prepared.check_case = checked
        return prepared
