"""What torch.compile's Inductor did: the code it generated and, for a GEMM, its max-autotune choice and time.

Read from Inductor's own hooks in torch 2.13 (the ones its tests use), never from its logs:
- `torch._inductor.graph.GraphLowering.save_output_code`: a static hook called with each compiled graph's wrapper
  code, also when the FX graph cache answers (codecache.py, after_deserialization; torch._inductor.utils
  .run_and_get_code patches it the same way). The wrapper is what runs: `extern_kernels.mm(...)` for ATen, a
  generated kernel's name otherwise.
- `AlgorithmSelectorCache.add_preprocessing_fn` (select_algorithm.py): called with every candidate list of an
  autotuned op before selection, also with a single candidate, which is returned without benchmarking
  (`if len(choices) == 1: ... return node, choices[0]`).
- `select_algorithm.add_feedback_saver`: called after autotuning with {choice: time in ms}; `__call__` keeps the
  fastest (`best_choice = min(timings, key=timings.__getitem__)`).
- `torch._dynamo.utils.compilation_time_metrics`: the seconds of every `dynamo_timed` block; autotuning is timed as
  f"{name}_template_precompiling" and f"{name}_template_autotuning" (do_autotuning, autotune). No new entry while the
  local autotune cache answers: nothing was benchmarked.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

# Candidate classes (torch 2.13 torch/_inductor: select_algorithm.py, codegen/cutlass/kernel.py,
# codegen/rocm/rocm_kernel.py, codegen/cpp_template_kernel.py, codegen/cutedsl/cutedsl_template.py,
# codegen/nv_universal_gemm/nv_universal_gemm.py) -> the implementation each stands for. Named by class name so that
# no optional backend is imported; an unknown class is reported by its own name.
GEMM_KINDS = {
    "ExternKernelCaller": "ATen (vendor BLAS: cuBLAS/hipBLASLt, oneDNN/MKL on a CPU)",
    "TritonTemplateCaller": "Triton template",
    "CUTLASSTemplateCaller": "CUTLASS",
    "ROCmTemplateCaller": "CK (Composable Kernel)",
    "CppTemplateCaller": "CPP template",
    "CuteDSLTemplateCaller": "CuTe DSL template",
    "NVUniversalGemmCaller": "NVIDIA universal GEMM (cutlass_api)",
    "SubgraphChoiceCaller": "decomposition subgraph",
}
# A compiled graph's generated kernels: Inductor names them <backend>_<category>_<fused ops>_<n> (codegen/triton.py
# define_kernel: "triton", the category's first 3 letters, e.g. "tem" for a template; cpp_fused_... on a CPU).
KERNEL_NAME = re.compile(r"\b(?:triton|cpp|cuda|rocm|cutlass|cutedsl)_[A-Za-z0-9_]*[0-9]\b")
EXTERN_CALL = re.compile(r"\bextern_kernels\.(\w+)\(")


def cpp_compiler_missing(platform_kind: str) -> str | None:
    """Inductor generates C++ on a CPU and needs a compiler to build it."""
    if platform_kind == "cpu" and not (shutil.which("cc") or shutil.which("gcc") or shutil.which("g++")):
        return "torch.compile on a CPU needs a C++ compiler (Inductor generates C++); none is on PATH"
    return None


def gemm_kind(choice: Any) -> str:
    return GEMM_KINDS.get(type(choice).__name__, type(choice).__name__)


@dataclass
class CompileRecord:
    """What one compilation (the first call under `record`) produced."""

    code: list[str] = field(default_factory=list)  # the wrapper code of each compiled graph
    offered: list[list[str]] = field(default_factory=list)  # per autotuned op: its candidates' kinds
    offered_names: list[list[str]] = field(default_factory=list)  # and their names, e.g. triton_flex_attention_0
    winners: list[dict[str, Any]] = field(default_factory=list)  # per benchmarked op: kind, choice, ms, candidates
    autotune_s: float | None = None  # seconds of benchmarking and precompiling; None: nothing was benchmarked
    compile_s: float = 0.0  # the first call's wall time: tracing, lowering, autotuning, building, running once

    def extern_calls(self) -> list[str]:
        return sorted({f"extern_kernels.{m}" for c in self.code for m in EXTERN_CALL.findall(_call_body(c))})

    def kernels(self) -> list[str]:
        return sorted({m for c in self.code for m in KERNEL_NAME.findall(_call_body(c))})


def _call_body(code: str) -> str:
    """The part of a wrapper that runs (its `def call(`), not the kernels' definitions above it."""
    at = code.find("def call(")
    return code[at:] if at >= 0 else code


def _autotune_seconds(metrics: dict[str, list[float]], before: dict[str, int]) -> float | None:
    new = [t for key, times in metrics.items() if key.endswith(("_template_autotuning", "_template_precompiling"))
           for t in times[before.get(key, 0):]]
    return sum(new) if new else None


@contextmanager
def record() -> Iterator[CompileRecord]:
    """Record what Inductor generates and autotunes inside the block (call the compiled function once in it)."""
    from unittest import mock

    import torch._dynamo.utils as dynamo_utils
    from torch._inductor import select_algorithm
    from torch._inductor.graph import GraphLowering

    rec = CompileRecord()
    cache = select_algorithm.get_algorithm_selector_cache()

    def offered(choices: list) -> list:
        rec.offered.append([gemm_kind(c) for c in choices])
        rec.offered_names.append([str(getattr(c, "name", "")) for c in choices])
        return choices

    def feedback(timings: dict, name: str, *_: Any) -> None:
        finite = {c: t for c, t in timings.items() if t == t and t != float("inf")}
        if finite:
            best = min(finite, key=finite.__getitem__)
            rec.winners.append({"op": name, "kind": gemm_kind(best), "choice": _describe(best),
                                "ms": finite[best], "benchmarked": len(timings),
                                "best_ms_by_kind": _best_by_kind(finite)})

    metrics = dynamo_utils.compilation_time_metrics
    before = {k: len(v) for k, v in metrics.items()}
    cache.add_preprocessing_fn(offered)
    cache.add_feedback_saver(feedback)
    start = time.perf_counter()
    try:
        with mock.patch.object(GraphLowering, "save_output_code", rec.code.append):
            yield rec
    finally:
        rec.compile_s = time.perf_counter() - start
        cache.preprocessing_fns.remove(offered)
        cache.feedback_saver_fns.remove(feedback)
        rec.autotune_s = _autotune_seconds(metrics, before)


def _describe(choice: Any) -> str:
    text = f"{getattr(choice, 'name', '')} {getattr(choice, 'description', '')}".strip()
    return text[:300]


def _best_by_kind(timings: dict) -> dict[str, float]:
    best: dict[str, float] = {}
    for choice, ms in timings.items():
        kind = gemm_kind(choice)
        best[kind] = min(ms, best.get(kind, ms))
    return best


def compiled_with(torch_module: Any, fn: Callable, **kwargs: Any) -> Callable:
    """torch.compile(fn, **kwargs), after a Dynamo reset: every case compiles afresh, so a sweep's shapes never reach
    Dynamo's recompile limit (8), past which it would run the frame eagerly with only a log warning."""
    torch_module._dynamo.reset()
    return torch_module.compile(fn, **kwargs)
