"""torch.matmul under torch.compile with mode="max-autotune-no-cudagraphs": Inductor benchmarks its GEMM candidates
(ATen's vendor BLAS, its Triton templates, CUTLASS on NVIDIA, CK on AMD, its C++ template on a CPU, as
torch._inductor.config.max_autotune_gemm_backends allows) and keeps the fastest. The row records the winner, the
candidates, the autotune and compile seconds (harness/machine/inductor.py reads them); compiling is set-up, not timed.

On a CPU, Inductor offers its C++ GEMM template only for a constant B (a frozen module's weight): torch 2.13
torch/_inductor/utils.py use_cpp_gemm_template(..., require_constant_mat2=True) ends with
`isinstance(mat2, ir.StorageBox) and (mat2.is_module_buffer() or not require_constant_mat2)`, and tuned_mm
(kernel/mm.py) calls it with the default. Here A and B are both inputs, as for every matmul backend, so ATen is the
one candidate and Inductor returns it without benchmarking; the row says so.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.engine.timing import rotate
from xmfu.harness.machine import inductor
from xmfu.harness.machine.frameworks import torch_rows
from xmfu.harness.machine.tf32 import torch_tf32_on
from xmfu.workloads.matmul import torch as eager
from xmfu.workloads.matmul.spec import MatmulCase

MODE = "max-autotune-no-cudagraphs"  # CUDA graphs off: xmfu's timer decides about graphs (timing.cuda_graph)


def available(case: MatmulCase, ctx: RunContext) -> tuple[bool, str]:
    if case.dtype == "fp8":  # torch.matmul takes no fp8 operands; the fp8 GEMM is torch._scaled_mm (the torch row)
        return False, "fp8 is timed through torch._scaled_mm by the torch backend; torch_compile compiles torch.matmul"
    ok, why = eager.available(case, ctx)
    if not ok:
        return ok, why
    why = inductor.cpp_compiler_missing(ctx.platform.kind)
    return (False, why) if why else (True, "")


def prepare(case: MatmulCase, ctx: RunContext) -> Prepared:
    import torch

    notes: dict[str, Any] = {"library": f"torch.compile(torch.matmul), Inductor mode={MODE}",
                             "torch_version": torch.__version__}
    if case.dtype == "tf32":
        state, why = torch_tf32_on(torch, ctx.platform.kind)
        if why:
            raise Unavailable(why)
        notes["tf32"] = state
    elif case.dtype == "fp32":
        torch.set_float32_matmul_precision("highest")
    pairs = eager._operands(case, ctx)
    compiled = inductor.compiled_with(torch, torch.matmul, mode=MODE, dynamic=False)
    with inductor.record() as rec:
        compiled(*pairs[0])  # compiles and autotunes: set-up, not timed
    notes.update(autotune_notes(rec, torch._inductor.config.max_autotune_gemm_backends))
    notes.update(fp32_matmul_precision=torch.get_float32_matmul_precision(), input_copies=len(pairs),
                 torch_threads=torch.get_num_threads() if ctx.platform.kind == "cpu" else None)
    calls = [partial(compiled, a, b) for a, b in pairs]

    def result(rows: np.ndarray | None) -> np.ndarray:
        return torch_rows(calls[0](), rows)

    return Prepared(rotate(calls), result, "torch", notes=notes)


def autotune_notes(rec: inductor.CompileRecord, backends: str) -> dict[str, Any]:
    """The row's record of the autotune: candidates, autotune's fastest, the winner (what the compiled code calls:
    Inductor's final pick, which its fastest need not be), seconds."""
    offered = rec.offered[0] if rec.offered else []
    picked = rec.gemm_pick()
    notes: dict[str, Any] = {"gemm_backends_allowed": backends, "compile_s": round(rec.compile_s, 3),
                             "compiled_calls": rec.extern_calls() + rec.kernels(),
                             "gemm_winner": picked or "unknown (no GEMM call found in the compiled code)",
                             "gemm_winner_from": "the compiled code"}
    if offered:
        notes["autotune_candidates"] = _count(offered)
    if rec.winners:
        win = rec.winners[0]
        notes.update(autotune_fastest=win["kind"], autotune_fastest_choice=win["choice"],
                     autotune_fastest_ms=round(win["ms"], 6),
                     autotune_best_ms_by_kind={k: round(v, 6) for k, v in win["best_ms_by_kind"].items()})
        if picked == win["kind"]:
            notes["gemm_winner_choice"] = win["choice"]
        elif picked is not None:
            notes["gemm_winner_differs"] = (f"autotune's fastest was {win['kind']} ({win['ms']:.4g} ms) but the "
                                            f"compiled code calls {picked}")
        notes["autotune"] = (f"ran: {win['benchmarked']} candidates benchmarked in {rec.autotune_s:.2f} s"
                             if rec.autotune_s is not None else
                             f"from Inductor's autotune cache: {win['benchmarked']} candidates' earlier timings")
    elif len(offered) == 1:
        notes["autotune"] = f"not run: one candidate ({offered[0]}), which Inductor takes without benchmarking"
    elif offered:  # every candidate failed to build or to run: Inductor falls back (ATen where it was offered)
        notes["autotune"] = "gave no finite timing; the winner is read from the compiled code"
    else:  # the FX graph cache answered: nothing was lowered, the compiled code is what runs
        notes["autotune"] = "not run: Inductor's FX graph cache answered; the winner is read from the cached code"
    notes["autotune_s"] = round(rec.autotune_s, 3) if rec.autotune_s is not None else "not measured (not run here)"
    return notes


def _count(kinds: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in kinds:
        out[k] = out.get(k, 0) + 1
    return out
