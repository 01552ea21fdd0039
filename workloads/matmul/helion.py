"""Helion (pytorch/helion) GEMM: examples/matmul.py's kernel (xmfu.kernels.helion_kernels). Optional: the extra
`helion` installs it. On a GPU helion autotunes it (`autotune_effort`, recorded with the config that won); on a CPU it
runs in Triton's interpreter with one fixed config, for correctness only (helion 1.5.1 runtime/settings.py: with
TRITON_INTERPRET=1 its kernels go through triton's interpreter; HELION_INTERPRET=1 is its own eager "ref mode",
which would check PyTorch rather than the kernel, and helion refuses the two together)."""

from __future__ import annotations

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine.frameworks import TRITON_INTERPRETER_NOTE, to_torch, torch_dtype, torch_rows
from xmfu.workloads.helion_support import (
    helion_settings,
    helion_unavailable,
    kernel_config,
    notes_for,
    refusal,
)
from xmfu.workloads.matmul.spec import MatmulCase
from xmfu.workloads.matmul.triton import checked_in_the_interpreter

DTYPES = ("fp32", "tf32", "bf16", "fp16")
# Helion's dot precision for fp32 inputs defaults to tf32 (runtime/settings.py _get_dot_precision, "Defaults to
# 'tf32'"): fp32 must ask for ieee, or it would time TF32 as fp32.
DOT_PRECISION = {"fp32": "ieee", "tf32": "tf32"}
INTERPRETER_BLOCKS = [64, 64, 64]  # block_m, block_n, block_k: few programs, edge tiles at the smoke sizes


def available(case: MatmulCase, ctx: RunContext) -> tuple[bool, str]:
    why = refusal(case.dtype, DTYPES, ctx.platform.kind, "Helion GEMM")
    return (False, why) if why else (True, "")


def prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    why = helion_unavailable(ctx.platform.kind)
    if why:
        raise Unavailable(why)
    return checked_in_the_interpreter(case, ctx, _prepare)


def _prepare(case: MatmulCase, ctx: RunContext, on_cpu: bool) -> Prepared:
    import torch

    from xmfu.kernels import helion_kernels

    precision = DOT_PRECISION.get(case.dtype)
    settings = helion_settings(on_cpu, INTERPRETER_BLOCKS, precision)
    kernel = helion_kernels.compile_kernel(helion_kernels.matmul, settings)
    a_np, b_np = case.stored_inputs()
    device = ctx.torch_device
    out = torch.empty((case.m, case.n), device=device, dtype=torch_dtype(case.dtype))
    calls = []
    for _ in range(ctx.input_copies(case.input_bytes())):
        a, b = (to_torch(x, case.dtype, device) for x in (a_np, b_np))
        a, b = (a.T if case.transpose_a else a), (b.T if case.transpose_b else b)
        calls.append(lambda a=a, b=b: kernel(a, b, out))
    notes = {**notes_for(settings, on_cpu), "kernel": "helion examples/matmul.py (addmm over K tiles)",
             "dot_precision": precision or "default", "interpreter": on_cpu, "input_copies": len(calls)}
    args = (a, b, out)

    def result(rows: np.ndarray | None) -> np.ndarray:
        calls[0]()
        notes["config"] = kernel_config(kernel, args)
        return torch_rows(out, rows)

    return Prepared(rotate(calls), result, "host" if on_cpu else "torch", timing_valid=not on_cpu,
                    timing_note=TRITON_INTERPRETER_NOTE if on_cpu else "", notes=notes)
