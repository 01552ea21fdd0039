"""Turning any torch attention function (q, k, v) -> out into the timed callable for fwd, bwd or fwd_bwd.

Shared by the torch_eager, torch_sdpa and triton backends so the three time exactly the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import to_torch, torch_rows
from xmfu.harness.machine.tf32 import torch_tf32_on
from xmfu.workloads.attention.spec import GRADS, AttentionCase

Attend = Callable[[Any, Any, Any], Any]


def _tensors(case: AttentionCase, device: str) -> dict[str, Any]:
    grad = case.mode != "fwd"
    out = {}
    for name, x in case.inputs().items():
        t = to_torch(x, case.dtype, device)
        out[name] = t.requires_grad_(grad and name != "do")
    return out


def _pick(t: Any, index: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Host float64 copy of t (B, H, S, D), or of the (batch, head) pairs in `index`."""
    if index is None:
        return torch_rows(t.detach(), None)
    import torch

    b, h = (torch.as_tensor(i, device=t.device) for i in index)
    return t.detach()[b, h].to(torch.float64).cpu().numpy()


def _call(case: AttentionCase, attend: Attend, x: dict[str, Any]) -> Callable[[], Any]:
    import torch

    q, k, v, do = x["q"], x["k"], x["v"], x["do"]
    if case.mode == "fwd":
        def fwd() -> Any:
            with torch.no_grad():
                return attend(q, k, v)
        return fwd
    if case.mode == "bwd":
        out = attend(q, k, v)  # the forward is set-up here; only the backward is timed
        return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    return lambda: torch.autograd.grad(attend(q, k, v), (q, k, v), do)


def prepare_torch(case: AttentionCase, ctx: RunContext, attend: Attend, notes: dict[str, Any], *,
                  timing_valid: bool = True, timing_note: str = "") -> Prepared:
    import torch

    if case.dtype == "tf32":  # HIPBLASLT_ALLOW_TF32 on ROCm, then what torch says it will do decides
        state, why = torch_tf32_on(torch, ctx.platform.kind)
        if why:
            raise Unavailable(why)
        notes = {**notes, "tf32": state}
    elif case.dtype == "fp32":
        torch.set_float32_matmul_precision("highest")
    copies = [_tensors(case, ctx.torch_device) for _ in range(ctx.input_copies(case.bytes_moved()))]
    first = copies[0]

    def result(select: dict | None) -> dict[str, np.ndarray]:
        sel = select or {}
        q, k, v, do = first["q"], first["k"], first["v"], first["do"]
        if case.mode == "fwd":
            with torch.no_grad():
                return {"out": _pick(attend(q, k, v), sel.get("out"))}
        out = attend(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), do)
        picked = {"out": _pick(out, sel.get("out"))}
        picked.update({n: _pick(g, sel.get(n)) for n, g in zip(GRADS, grads, strict=True)})
        return picked

    notes = {**notes, "input_copies": len(copies), "layout": "B,H,S,D"}
    return Prepared(rotate([_call(case, attend, x) for x in copies]), result, "torch", timing_valid=timing_valid,
                    timing_note=timing_note, notes=notes)
