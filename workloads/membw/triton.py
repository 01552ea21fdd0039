"""xmfu's Triton STREAM kernel (kernels/stream.py); on a CPU it runs in Triton's interpreter for correctness."""

from __future__ import annotations

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, to_torch, torch_rows, triton_unavailable
from xmfu.workloads.membw.spec import INPUTS, SCALAR, MembwCase

INTERPRETER_LIMIT = 2**20  # elements: Triton's interpreter runs each program in numpy; a smoke size is milliseconds


def available(case: MembwCase, ctx: RunContext) -> tuple[bool, str]:
    why = triton_unavailable(ctx.platform.kind)
    if why:
        return False, why
    if ctx.platform.kind == "cpu" and case.n > INTERPRETER_LIMIT:
        return False, (f"Triton's interpreter on a CPU checks membw up to {INTERPRETER_LIMIT} elements (it is not "
                       f"timed there); this case has {case.n}")
    return True, ""


def prepare(case: MembwCase, ctx: RunContext) -> Prepared:
    import torch

    from xmfu.kernels import stream

    why = triton_unavailable(ctx.platform.kind)  # again: the interpreter can no longer be chosen late
    if why:
        raise Unavailable(why)
    on_cpu = ctx.platform.kind == "cpu"
    host = case.inputs()
    first = {n: to_torch(host[n], case.dtype, ctx.torch_device) for n in INPUTS[case.kernel]}
    copies = [first] + [{k: v.clone() for k, v in first.items()}
                        for _ in range(ctx.input_copies(case.input_bytes()) - 1)]
    for c in copies:
        c["out"] = torch.empty_like(c["x"])
    calls = [(lambda c=c: stream.stream(case.kernel, c["out"], c["x"], c.get("y"), SCALAR)) for c in copies]

    def result(rows: np.ndarray | None) -> np.ndarray:
        return torch_rows(calls[0](), rows)

    def fresh_inputs(new: MembwCase) -> None:  # timing.fresh_inputs: new values into the same buffers
        values = new.inputs()
        for n in INPUTS[case.kernel]:
            first[n].copy_(to_torch(values[n], case.dtype, ctx.torch_device))

    notes = {"library": "xmfu.kernels.stream (Triton)", "interpreter": on_cpu, "input_copies": len(calls),
             "block": stream.BLOCK, **case.notes(ctx.device.cache_bytes)}
    return Prepared(rotate(calls), result, "host" if on_cpu else "torch", timing_valid=not on_cpu,
                    timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "", notes=notes, fresh_inputs=fresh_inputs,
                    output=torch_rows)
