"""The STREAM kernels as torch ops writing into a preallocated output (`out=`): one elementwise kernel each on a GPU,
ATen's vectorised loop on a CPU."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import to_torch, torch_rows, torch_unavailable
from xmfu.workloads.membw.spec import INPUTS, SCALAR, MembwCase


def available(case: MembwCase, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind, ctx.device.arch)
    return (False, why) if why else (True, "")


def op(kernel: str, out: Any, x: Any, y: Any = None) -> Any:
    """One STREAM kernel into `out`: copy out=x, scale out=3x, add out=x+y, triad out=x+3y (torch.add's alpha
    scales its second operand)."""
    import torch

    if kernel == "copy":
        return out.copy_(x)
    if kernel == "scale":
        return torch.mul(x, SCALAR, out=out)
    if kernel == "add":
        return torch.add(x, y, out=out)
    return torch.add(x, y, alpha=SCALAR, out=out)


def _buffers(case: MembwCase, ctx: RunContext) -> list[dict[str, Any]]:
    """The inputs (rotated copies under timing.cold_cache) and each copy's output."""
    import torch

    host = case.inputs()
    first = {name: to_torch(host[name], case.dtype, ctx.torch_device) for name in INPUTS[case.kernel]}
    copies = [first] + [{k: v.clone() for k, v in first.items()}
                        for _ in range(ctx.input_copies(case.input_bytes()) - 1)]
    for c in copies:
        c["out"] = torch.empty_like(c["x"])
    return copies


def prepare(case: MembwCase, ctx: RunContext) -> Prepared:
    copies = _buffers(case, ctx)
    calls = [partial(op, case.kernel, c["out"], c["x"], c.get("y")) for c in copies]

    def result(rows: np.ndarray | None) -> np.ndarray:
        return torch_rows(calls[0](), rows)

    def fresh_inputs(new: MembwCase) -> None:  # timing.fresh_inputs: new values into the same buffers
        host = new.inputs()
        for name in INPUTS[case.kernel]:
            copies[0][name].copy_(to_torch(host[name], case.dtype, ctx.torch_device))

    notes = {"library": f"torch ({case.kernel} into out=)", "input_copies": len(calls),
             **case.notes(ctx.device.cache_bytes)}
    return Prepared(rotate(calls), result, "torch", notes=notes, fresh_inputs=fresh_inputs, output=torch_rows)
