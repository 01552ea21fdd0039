"""What torch.compile's Inductor did: the code it generated and, for a GEMM, its max-autotune choice and time.

Read from Inductor's own hooks (the ones its tests use), never from its logs. Each named as torch 2.13 has it, with
what torch 2.6.0 (the declared floor and AMD's rocm/pytorch image; its wheel's torch/_inductor/select_algorithm.py)
has instead:
- `torch._inductor.graph.GraphLowering.save_output_code`: a static hook called with each compiled graph's wrapper
  code, also when the FX graph cache answers (codecache.py, after_deserialization; torch._inductor.utils
  .run_and_get_code patches it the same way). The wrapper is what runs: `extern_kernels.mm(...)` for ATen, a
  generated kernel's name otherwise. Inductor's final pick is read here (`CompileRecord.gemm_pick`): with epilogue
  fusion benchmarked (return_multi_template) the scheduler may keep another candidate than autotune's fastest.
- `AlgorithmSelectorCache.add_preprocessing_fn` (select_algorithm.py): called with every candidate list of an
  autotuned op before selection, also with a single candidate, which is returned without benchmarking
  (`if len(choices) == 1: ... return node, choices[0]`). torch 2.6 has no preprocessing hook (and no
  `get_algorithm_selector_cache()`: the cache is the module global `_ALGORITHM_SELECTOR_CACHE`, made by the
  module's `add_feedback_saver` or the first `autotune_select_algorithm`); there the candidates are read where the
  cache is called, `AlgorithmSelectorCache.__call__(self, name, choices, input_nodes, layout, ...)`, whose first
  two arguments are the same in 2.6 and 2.13.
- `add_feedback_saver`: called after autotuning with {choice: time in ms} (2.6: `(timings, name, input_nodes,
  choices)`; 2.13 adds two more arguments); `__call__` keeps the fastest (`best_choice = min(timings,
  key=timings.__getitem__)`).
- `torch._dynamo.utils.compilation_time_metrics`: the seconds of every `dynamo_timed` block; autotuning is timed as
  f"{name}_template_precompiling" and f"{name}_template_autotuning" (do_autotuning, autotune; in 2.6 too). No new
  entry while the local autotune cache answers: nothing was benchmarked.
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
# ATen's GEMMs as the wrapper calls them (torch/_inductor/kernel/mm.py, bmm.py, mm_scaled*.py: aten_mm, aten_addmm,
# aten_bmm, aten_baddbmm, aten__scaled_mm, aten__int_mm are ExternKernelChoice(torch.mm, ...) and the like).
EXTERN_GEMMS = ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_int_mm", "_addmm_activation")
# A generated GEMM kernel's prefix -> the candidate kind it came from: codegen/triton.py names a template's kernel
# triton_tem_<ops>_<n> ("tem": the first 3 letters of its category); cutlass/template.py cutlass_<hash> (2.13),
# cuda/cuda_template.py cuda_<name> (2.6); rocm/rocm_template.py rocm_<name>; cpp_gemm_template.py's code calls
# its micro-GEMM (cpp_micro_gemm.py), which no other C++ kernel does.
GENERATED_GEMMS = (("triton_tem_", "TritonTemplateCaller"), ("cutlass_", "CUTLASSTemplateCaller"),
                   ("cuda_", "CUTLASSTemplateCaller"), ("rocm_", "ROCmTemplateCaller"))


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

    def gemm_pick(self) -> str | None:
        """The GEMM implementation the compiled code runs (a GEMM_KINDS value), None where it names none: what
        Inductor finally kept, which autotune's fastest need not be."""
        if any(call.split(".", 1)[1] in EXTERN_GEMMS for call in self.extern_calls()):
            return GEMM_KINDS["ExternKernelCaller"]
        for kernel in self.kernels():
            for prefix, caller in GENERATED_GEMMS:
                if kernel.startswith(prefix):
                    return GEMM_KINDS[caller]
        if any("micro_gemm" in c for c in self.code):
            return GEMM_KINDS["CppTemplateCaller"]
        return None


def _call_body(code: str) -> str:
    """The part of a wrapper that runs (its `def call(`), not the kernels' definitions above it."""
    at = code.find("def call(")
    return code[at:] if at >= 0 else code


def _autotune_seconds(metrics: dict[str, list[float]], before: dict[str, int]) -> float | None:
    new = [t for key, times in metrics.items() if key.endswith(("_template_autotuning", "_template_precompiling"))
           for t in times[before.get(key, 0):]]
    return sum(new) if new else None


def _selector_cache(select_algorithm: Any) -> Any:
    """The process's AlgorithmSelectorCache: torch 2.13's getter, else (2.6) the module global, made here as 2.6's
    own add_feedback_saver and autotune_select_algorithm make it when it is still None."""
    getter = getattr(select_algorithm, "get_algorithm_selector_cache", None)
    if getter is not None:
        return getter()
    if select_algorithm._ALGORITHM_SELECTOR_CACHE is None:
        select_algorithm._ALGORITHM_SELECTOR_CACHE = select_algorithm.AlgorithmSelectorCache()
    return select_algorithm._ALGORITHM_SELECTOR_CACHE


@contextmanager
def _candidates_seen(cache: Any, offered: Callable[[list], list]) -> Iterator[None]:
    """`offered` sees every candidate list: through the preprocessing hook where this torch has one, else (2.6)
    through the cache's own __call__, patched on its class for the block."""
    from unittest import mock

    if hasattr(cache, "add_preprocessing_fn"):
        cache.add_preprocessing_fn(offered)
        try:
            yield
        finally:
            cache.preprocessing_fns.remove(offered)
        return
    select = type(cache).__call__

    def call(self: Any, name: str, choices: list, *args: Any, **kwargs: Any) -> Any:
        offered([c for c in choices if c is not None])  # 2.6's __call__ drops None choices first, too
        return select(self, name, choices, *args, **kwargs)

    with mock.patch.object(type(cache), "__call__", call):
        yield


@contextmanager
def record() -> Iterator[CompileRecord]:
    """Record what Inductor generates and autotunes inside the block (call the compiled function once in it)."""
    from unittest import mock

    import torch._dynamo.utils as dynamo_utils
    from torch._inductor import select_algorithm
    from torch._inductor.graph import GraphLowering

    rec = CompileRecord()
    cache = _selector_cache(select_algorithm)

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
    cache.add_feedback_saver(feedback)
    start = time.perf_counter()
    try:
        with _candidates_seen(cache, offered), mock.patch.object(GraphLowering, "save_output_code", rec.code.append):
            yield rec
    finally:
        rec.compile_s = time.perf_counter() - start
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
