"""The Inductor library backends: matmul `torch_compile` (max-autotune) and attention `torch_flex` (FlexAttention).

What Inductor chose is read from its own hooks (harness/machine/inductor.py); the hook tests drive them through
torch 2.13's real AlgorithmSelectorCache with stand-in candidates named as Inductor's classes are.
"""

from __future__ import annotations

import pytest

from xmfu.harness.machine import inductor
from xmfu.harness.machine.compat import release
from xmfu.workloads.attention import torch_flex
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.catalog import build_registry
from xmfu.workloads.matmul import torch_compile
from xmfu.workloads.matmul.spec import MatmulCase


class TritonTemplateCaller:  # named as torch._inductor.select_algorithm's classes: gemm_kind reads the name
    name, description = "triton_mm_3", "BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=3, num_warps=8"


class ExternKernelCaller:
    name, description = "mm", ""


# The wrapper code Inductor generates (its `call`): a Triton template's kernel, or ATen's mm.
TRITON_CALL = "def call(args):\n    triton_tem_fused_mm_0.run(arg0_1, arg1_1, buf0, grid=grid(8), stream=stream0)\n"
ATEN_CALL = "def call(args):\n    extern_kernels.mm(arg0_1, arg1_1, out=buf0)\n"


def inductor_version():
    from torch._inductor import select_algorithm

    return select_algorithm


def test_both_backends_are_in_the_catalog():
    registry = build_registry()
    assert "torch_compile" in registry.workload("matmul").implementations
    assert "torch_flex" in registry.workload("attention").implementations


def _run_hooks(cache, choices, timings):
    """What torch 2.13's AlgorithmSelectorCache.__call__ does with its hooks: preprocessing, then feedback."""
    for fn in cache.preprocessing_fns:
        choices = fn(choices)
    for fn in cache.feedback_saver_fns:
        fn({c: t for c, t in zip(choices, timings, strict=True)}, "mm", [], choices, lambda: {}, {})


@pytest.mark.skipif(not hasattr(inductor_version(), "get_algorithm_selector_cache"),
                    reason="torch 2.6 has no preprocessing hook (its own test below)")
def test_the_autotune_winner_and_candidates_come_from_inductors_selection_hooks():
    """A GPU-like autotune, fed through the hooks Inductor calls (preprocessing with every candidate list, feedback
    with the benchmarked times): the fastest is autotune's, the compiled code's call the winner."""
    from torch._inductor import select_algorithm
    from torch._inductor.graph import GraphLowering

    cache = select_algorithm.get_algorithm_selector_cache()
    with inductor.record() as rec:
        _run_hooks(cache, [ExternKernelCaller(), TritonTemplateCaller()], [0.50, 0.42])
        GraphLowering.save_output_code(TRITON_CALL)
    assert not any(f.__name__ == "feedback" for f in cache.feedback_saver_fns)  # removed on leaving
    assert not any(f.__name__ == "offered" for f in cache.preprocessing_fns)
    notes = torch_compile.autotune_notes(rec, "ATEN,TRITON")
    assert notes["gemm_winner"] == "Triton template" and "BLOCK_K=64" in notes["gemm_winner_choice"]
    assert notes["autotune_fastest"] == "Triton template" and "gemm_winner_differs" not in notes
    assert notes["autotune_candidates"] == {inductor.GEMM_KINDS["ExternKernelCaller"]: 1, "Triton template": 1}
    assert notes["autotune_best_ms_by_kind"][inductor.GEMM_KINDS["ExternKernelCaller"]] == 0.5
    assert notes["autotune"].startswith("from Inductor's autotune cache")  # nothing benchmarked in this block


def test_the_record_hooks_into_the_installed_torch_and_unhooks():
    """Against this stack's own Inductor (the floor profile: torch 2.6, which has neither
    get_algorithm_selector_cache nor the preprocessing hook): entering and leaving the record leaves no hook."""
    from torch._inductor import select_algorithm

    with inductor.record() as rec:
        cache = inductor._selector_cache(select_algorithm)
        assert any(f.__name__ == "feedback" for f in cache.feedback_saver_fns)
    assert not any(f.__name__ == "feedback" for f in cache.feedback_saver_fns)
    assert not any(f.__name__ == "offered" for f in getattr(cache, "preprocessing_fns", []))
    assert type(cache).__call__.__name__ == "__call__" and rec.code == [] and rec.autotune_s is None


def test_on_torch_2_6_the_candidates_are_read_where_its_cache_is_called(monkeypatch):
    """torch 2.6.0 has no get_algorithm_selector_cache nor preprocessing hook (tests/fakes names what it has): the
    record reads the candidates at the cache's __call__, the times from its four-argument feedback, and leaves
    both as they were. A single candidate is taken unbenchmarked, as 2.6 does."""
    import torch._inductor
    from torch._inductor.graph import GraphLowering

    from tests.fakes import inductor_select_algorithm_26 as sa26

    monkeypatch.setattr(sa26, "_ALGORITHM_SELECTOR_CACHE", None)
    monkeypatch.setattr(torch._inductor, "select_algorithm", sa26)
    aten, triton = ExternKernelCaller(), TritonTemplateCaller()
    with inductor.record() as rec:
        cache = sa26._ALGORITHM_SELECTOR_CACHE
        cache.timings = {aten: 0.50, triton: 0.42}
        assert sa26.autotune_select_algorithm("mm", [aten, None, triton], [], None) is triton
        GraphLowering.save_output_code(TRITON_CALL)
    assert cache.feedback_saver_fns == [] and sa26.AlgorithmSelectorCache.__call__.__name__ == "__call__"
    notes = torch_compile.autotune_notes(rec, "ATEN,TRITON")
    assert notes["autotune_candidates"] == {inductor.GEMM_KINDS["ExternKernelCaller"]: 1, "Triton template": 1}
    assert notes["gemm_winner"] == notes["autotune_fastest"] == "Triton template"
    with inductor.record() as rec:
        sa26.autotune_select_algorithm("mm", [aten], [], None)
        GraphLowering.save_output_code(ATEN_CALL)
    notes = torch_compile.autotune_notes(rec, "ATEN")
    assert notes["autotune"].startswith("not run: one candidate") and "autotune_fastest" not in notes
    assert notes["gemm_winner"] == inductor.GEMM_KINDS["ExternKernelCaller"]


def test_the_winner_is_what_the_compiled_code_calls_when_autotunes_fastest_was_not_kept():
    """With epilogue fusion benchmarked Inductor's scheduler may keep ATen after a Triton template timed fastest:
    the row names the code's call and says that it differs."""
    rec = inductor.CompileRecord(code=[ATEN_CALL], offered=[["Triton template", "Triton template"]],
                                 winners=[{"op": "mm", "kind": "Triton template", "choice": "triton_mm_3", "ms": 0.4,
                                           "benchmarked": 2, "best_ms_by_kind": {"Triton template": 0.4}}])
    notes = torch_compile.autotune_notes(rec, "ATEN,TRITON")
    assert notes["gemm_winner"] == inductor.GEMM_KINDS["ExternKernelCaller"] and "gemm_winner_choice" not in notes
    assert notes["gemm_winner_differs"].startswith("autotune's fastest was Triton template (0.4 ms)")
    for code, kind in ((TRITON_CALL, "Triton template"),
                       ("def call(args):\n    cutlass_1a2b3c_0.run(buf0)\n", "CUTLASS"),
                       ("def call(args):\n    rocm_ck_gemm_template_3(buf0)\n", "CK (Composable Kernel)"),
                       ("def call(args):\n    triton_poi_fused_0.run(buf0)\n", None)):
        assert inductor.CompileRecord(code=[code]).gemm_pick() == kind


def test_a_cached_compile_reads_the_winner_from_the_compiled_code():
    rec = inductor.CompileRecord(code=[ATEN_CALL])
    notes = torch_compile.autotune_notes(rec, "ATEN,TRITON,CPP")
    assert notes["gemm_winner"] == inductor.GEMM_KINDS["ExternKernelCaller"]
    assert notes["autotune"].startswith("not run: Inductor's FX graph cache answered")
    assert notes["compiled_calls"] == ["extern_kernels.mm"] and notes["autotune_s"].startswith("not measured")


def test_flex_on_torch_2_6_finds_its_cpu_check_in_flex_attention_and_refuses_fp16(monkeypatch):
    """torch 2.6.0 has no torch._inductor.kernel.flex package: check_cpu_supported is in kernel/flex_attention.py,
    whose lower_cpu takes fp32 and bf16 only."""
    import sys
    import types

    old = types.ModuleType("torch._inductor.kernel.flex_attention")
    old.check_cpu_supported = lambda: True
    monkeypatch.setitem(sys.modules, "torch._inductor.kernel.flex.flex_cpu", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "torch._inductor.kernel.flex_attention", old)
    torch26 = types.SimpleNamespace(__version__="2.6.0+cu124")
    assert torch_flex._cpu_unsupported(torch26, "bf16") is None
    assert "fp32 and bf16 only" in torch_flex._cpu_unsupported(torch26, "fp16")
    old.check_cpu_supported = lambda: False
    assert "needs AVX2" in torch_flex._cpu_unsupported(torch26, "fp32")


@pytest.mark.long  # the slow group (make test-slow; CI's floor run has it): a fresh interpreter importing Inductor
@pytest.mark.slow(seconds=20)
def test_the_cpu_check_leaves_flex_attention_its_lowering_in_a_fresh_process():
    """On torch 2.6 importing an Inductor kernel module before torch._inductor.lowering stops in a circular import
    that leaves flex_attention without its lowering; the check is the first thing a torch_flex row does in a fresh
    `xmfu run`, so it must not be what breaks the compile."""
    import subprocess
    import sys

    code = ("import torch\nfrom xmfu.workloads.attention import torch_flex\n"
            "torch_flex._cpu_unsupported(torch, 'bf16')\nfrom torch._inductor.lowering import lowerings\n"
            "print(torch.ops.higher_order.flex_attention in lowerings)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.stdout.strip().splitlines()[-1:] == ["True"], done.stderr[-2000:]


def test_skips_name_their_reason(cpu_ctx, monkeypatch):
    ok, why = torch_compile.available(MatmulCase(32, 32, 32, "fp8", fp8_format="e4m3fn"), cpu_ctx)
    assert not ok and "_scaled_mm" in why
    ok, why = torch_flex.available(AttentionCase(1, 4, 2, 19, 37, 64, True, "top_left", 0.125, "bf16", "fwd_bwd"),
                                   cpu_ctx)
    assert not ok and why == torch_flex.CPU_NO_BACKWARD
    monkeypatch.setattr(inductor.shutil, "which", lambda name: None)
    for backend, case in ((torch_compile, MatmulCase(32, 32, 32, "fp32")),
                          (torch_flex, AttentionCase(1, 2, 2, 16, 16, 64, False, "top_left", 0.125, "fp32", "fwd"))):
        ok, why = backend.available(case, cpu_ctx)
        assert not ok and "needs a C++ compiler" in why


@pytest.mark.long  # the slow group (make test-slow): Inductor's first compile in a process, about 30 s here
@pytest.mark.slow(seconds=30)
def test_matmul_torch_compile_is_correct_on_a_cpu_and_says_aten_was_the_one_candidate(cpu_ctx):
    """On a CPU, Inductor offers its C++ GEMM template only for a constant B (utils.py use_cpp_gemm_template), so
    a matmul of two inputs has ATen alone and no autotune runs. 67x45x33, B transposed: off every tile size."""
    case = MatmulCase(67, 45, 33, "bf16", transpose_b=True)
    assert torch_compile.available(case, cpu_ctx) == (True, "")
    prepared = torch_compile.prepare(case, cpu_ctx)
    prepared.fn()
    assert case.check(prepared.result(case.check_rows())).ok
    notes = prepared.notes
    assert notes["gemm_winner"] == inductor.GEMM_KINDS["ExternKernelCaller"], notes
    assert notes["autotune"].startswith(("not run: one candidate", "not run: Inductor's FX graph cache"))
    assert notes["compiled_calls"] == ["extern_kernels.mm"] and notes["compile_s"] > 0
    assert prepared.timing_valid and notes["torch_version"]


@pytest.mark.long  # the slow group (make test-slow): FlexAttention's C++ compile, 25-50 s per case here
@pytest.mark.slow(seconds=80)
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_flex_attention_is_correct_on_a_cpu_with_gqa_and_either_causal_alignment(alignment, cpu_ctx):
    case = AttentionCase(1, 4, 2, 37, 53, 64, True, alignment, 0.1, "bf16", "fwd")
    assert torch_flex.available(case, cpu_ctx) == (True, "")
    prepared = torch_flex.prepare(case, cpu_ctx)
    prepared.fn()
    check = case.check(prepared.result(case.check_rows()))
    assert check.ok, check
    notes = prepared.notes
    assert notes["block_mask"].startswith("causal")
    if release(notes["torch_version"]) >= (2, 7):  # the kernel is named after the template
        assert any("flex_attention" in k for k in notes["compiled_kernels"]), notes
    else:  # torch 2.6 names its C++ template's kernel cpp_fused_N; the template shows among the candidates
        assert notes["compiled_kernels"] and all(k.startswith("cpp_fused") for k in notes["compiled_kernels"]), notes
        assert notes["flex_templates"] == ["cpp_flex_attention"] or "cache answered" in notes["flex_templates"]
