"""Plain torch attention: materialized scores, softmax in fp32, then P·V. What every fused kernel must equal."""

from __future__ import annotations

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import torch_unavailable
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.attention.torch_modes import prepare_torch


def available(case: AttentionCase, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind, ctx.device.arch)
    return (False, why) if why else (True, "")


def prepare(case: AttentionCase, ctx: RunContext) -> Prepared:
    import torch

    mask = None
    if case.causal:
        i = torch.arange(case.seq_q, device=ctx.torch_device)[:, None]
        j = torch.arange(case.seq_kv, device=ctx.torch_device)[None, :]
        mask = j <= i + case.causal_offset  # (Sq, Skv)

    def attend(q, k, v):
        if case.group > 1:  # GQA: query head h reads kv head h // group
            k, v = k.repeat_interleave(case.group, dim=1), v.repeat_interleave(case.group, dim=1)
        s = torch.matmul(q, k.transpose(-2, -1)) * case.scale  # (B, H, Sq, Skv)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s.float(), dim=-1).to(q.dtype)
        return torch.matmul(p, v)  # (B, H, Sq, D)

    return prepare_torch(case, ctx, attend, {"library": "torch eager (materialized softmax)"})
