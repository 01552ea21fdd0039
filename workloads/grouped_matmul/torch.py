"""torch._grouped_mm (cuBLAS/CUTLASS grouped GEMM on NVIDIA; a loop over groups inside aten elsewhere) where this torch
has it for the dtype on the device, else one torch.matmul per group; the row's notes say which."""

from __future__ import annotations

import numpy as np

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.frameworks import to_torch, torch_rows, torch_unavailable
from xmfu.workloads.grouped_matmul.spec import GroupedMatmulCase

GROUPED = "torch._grouped_mm (one call for all groups)"
LOOP = "loop: one torch.matmul per group"


def available(case: GroupedMatmulCase, ctx: RunContext) -> tuple[bool, str]:
    why = torch_unavailable(case.dtype, ctx.platform.kind, ctx.device.arch)
    return (False, why) if why else (True, "")


def _problem(case: GroupedMatmulCase, device_type: str, dtype) -> str | None:
    """Why torch._grouped_mm cannot run this case here (the transformer's probe, and its 16-byte row rule)."""
    from xmfu.workloads.transformer.torch_moe import grouped_mm_problem

    why = grouped_mm_problem(device_type, dtype)
    if why is None and (case.k * dtype.itemsize % 16 or case.n * dtype.itemsize % 16):
        why = "torch._grouped_mm needs rows of a multiple of 16 bytes (K and N)"
    return why


def prepare(case: GroupedMatmulCase, ctx: RunContext) -> Prepared:
    import torch

    if case.dtype == "fp32":
        torch.set_float32_matmul_precision("highest")
    host = case.inputs()
    a, b = (to_torch(host[n], case.dtype, ctx.torch_device) for n in ("a", "b"))
    sizes = [int(s) for s in host["group_sizes"]]
    why = _problem(case, torch.device(ctx.torch_device).type, a.dtype)
    if why is None:
        offs = torch.from_numpy(case.offsets()[1:]).to(ctx.torch_device)  # (G,) each group's end

        def call():
            return torch._grouped_mm(a, b, offs=offs)
    else:
        def call():
            return torch.cat([rows @ b[g] for g, rows in enumerate(a.split(sizes))])

    def result(rows: np.ndarray | None) -> np.ndarray:
        return torch_rows(call(), rows)

    notes = {"library": GROUPED if why is None else f"{LOOP} ({why})",
             "fp32_matmul_precision": torch.get_float32_matmul_precision()}
    return Prepared(call, result, "torch", notes=notes, output=torch_rows)
