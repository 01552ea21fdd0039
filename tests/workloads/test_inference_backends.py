"""Every inference backend on the tiny preset: its correctness gate against the fp64 model (logits and greedy
tokens), the decode step cycling through the cache positions, and the FLOP count cross-checked with torch's."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from tests.conftest import QUICK_TIMING, gpu_device, run_config
from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.engine.case import Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.platform import Platform
from xmfu.workloads.inference import arithmetic as ar
from xmfu.workloads.inference import jax as jax_backend
from xmfu.workloads.inference import torch as torch_backend
from xmfu.workloads.inference import torch_compile, torch_triton
from xmfu.workloads.inference.cases import InferenceCase
from xmfu.workloads.transformer.spec import model_from_config

TINY = model_from_config(yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text()))
BACKENDS = {"torch": torch_backend, "jax": jax_backend, "torch_triton": torch_triton, "torch_compile": torch_compile}


def _prepared(name, case, ctx):
    module = BACKENDS[name]
    ok, why = module.available(case, ctx)
    assert ok, why
    return module.prepare(case, ctx)


def _steps_through_every_position(prepared, case) -> None:
    """Two generations of samples, each step called twice (as a warm-up call or JAX's drain call repeats it)."""
    assert prepared.calls_per_sample == 1 and prepared.before_sample is not None
    logits = []
    for _ in range(2 * case.gen_len):
        prepared.before_sample()
        first = np.asarray(prepared.fn(), dtype=np.float64)
        logits.append(np.asarray(prepared.fn(), dtype=np.float64))
        np.testing.assert_allclose(logits[-1], first, rtol=1e-6)  # a repeated step changes nothing
    for a, b in zip(logits[:case.gen_len], logits[case.gen_len:], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)  # the second generation repeats the first exactly
    assert not np.allclose(logits[0], logits[1])  # consecutive samples are different positions


@pytest.mark.parametrize(("name", "dtype"), [("torch", "fp32"), ("torch", "bf16"), ("jax", "fp32"), ("jax", "bf16"),
                                             ("torch_triton", "fp32"),
                                             pytest.param("torch_compile", "fp32", marks=pytest.mark.slow(seconds=50))])
def test_prefill_and_first_decode_steps_match_the_fp64_model(name, dtype, cpu_ctx, request):
    if name == "torch_compile":
        request.getfixturevalue("inductor_quick_cpu_build")  # conftest: fewer g++ runs, scalar kernels
    case = InferenceCase(TINY, dtype, "decode", 2, 8, 4, check_steps=2)
    prepared = _prepared(name, case, cpu_ctx)
    result = prepared.result(None)
    check = case.check(result)
    assert check.ok, check
    assert result["logits"].shape == (3, TINY.vocab) and result["tokens"].shape == (3,)
    if dtype == "fp32":  # every step compared: no near-tie within fp32's tolerance on this prompt
        assert "compared at 3 of 3 steps" in check.checked
    if name == "torch_triton":  # the interpreter: checked, never timed
        assert prepared.timing_valid is False and prepared.notes["interpreter"] is True
    elif dtype == "fp32":
        _steps_through_every_position(prepared, case)


def test_prefill_is_one_call_per_sample_without_a_hook(cpu_ctx):
    prepared = _prepared("torch", InferenceCase(TINY, "fp32", "prefill", 2, 8, 4, check_steps=2), cpu_ctx)
    assert prepared.calls_per_sample == 1 and prepared.before_sample is None
    np.testing.assert_allclose(prepared.fn(), prepared.fn(), rtol=1e-6)  # from position 0 again


def test_torch_flop_counter_agrees_with_the_formulas():
    """FlopCounterMode counts the matmuls (not the CPU SDPA kernel, nor the norms' elementwise products): the
    formulas minus the attention term and 2 FLOPs per norm weight per token."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tests.workloads.test_attention_backends import cpu_flash_takes_gqa
    from xmfu.workloads.inference.torch_decoder import sdpa_prefix
    from xmfu.workloads.inference.torch_generate import Generation, build_decoder

    case = InferenceCase(TINY, "fp32", "decode", 2, 16, 8)
    norms = (2 * TINY.n_layers + 1) * TINY.d_model
    gen = Generation(case, build_decoder(case, "cpu", sdpa_prefix, None)[0], "cpu", compile_phase=None)
    with torch.no_grad(), FlopCounterMode(display=False) as prefill:
        gen.prefill()
    attention = 2 * 16 * 16 * ar.attention_flops_per_key(TINY)  # B · P tokens · P keys (palm)
    step_attention = 0  # the decode step's: B · 1 token · 21 keys (positions 0-20)
    if not cpu_flash_takes_gqa():  # torch 2.6: GQA runs SDPA's math path, whose matmuls the counter counts
        attention, step_attention = 0, 2 * 21 * ar.attention_flops_per_key(TINY)
    assert prefill.get_total_flops() == ar.prefill_flops(TINY, 2, 16, "palm") - attention - 2 * norms * 2 * 16
    with torch.no_grad(), FlopCounterMode(display=False) as step:
        gen.step(20)
    assert step.get_total_flops() == ar.decode_step_flops(TINY, 2, 0) + step_attention - 2 * norms * 2


def test_decode_under_cuda_graph_timing_is_skipped_with_the_reason():
    """A captured graph would replay one cache position; torch_compile's own CUDA graphs step through them."""
    cfg = run_config(timing={**QUICK_TIMING, "cuda_graph": True})
    ctx = RunContext(cfg, Platform("cuda", (gpu_device("NVIDIA H100 80GB HBM3", 132),), "test"))
    from xmfu.workloads.inference.torch_generate import prepare_generation

    with pytest.raises(Unavailable, match="one cache position"):
        prepare_generation(InferenceCase(TINY, "bf16", "decode", 1, 8, 4), ctx, notes={})


def test_check_pass_keeps_each_decode_steps_logits_when_replays_reuse_one_output_buffer():
    """Under mode="reduce-overhead" a decode step is a CUDA graph replay whose outputs live in the graph's static
    memory: the next step overwrites them (cudagraph trees even poison that storage on the next step). The fake
    step returns the eager step's logits in one reused buffer, as a replay does."""
    import torch

    from xmfu.workloads.inference.torch_decoder import sdpa_prefix
    from xmfu.workloads.inference.torch_generate import Generation, build_decoder

    case = InferenceCase(TINY, "fp32", "decode", 2, 8, 4, check_steps=3)

    def generation():
        return Generation(case, build_decoder(case, "cpu", sdpa_prefix, None)[0], "cpu", compile_phase=None)

    with torch.no_grad():
        expected = generation().check_pass()
        gen = generation()
        eager, static = gen._step, {}

        def replayed(token, positions, start):
            logits, nxt = eager(token, positions, start)
            if not static:
                static.update(logits=torch.empty_like(logits), nxt=torch.empty_like(nxt))
            static["logits"].copy_(logits)
            static["nxt"].copy_(nxt)
            return static["logits"], static["nxt"]

        gen._step = replayed
        got = gen.check_pass()
    np.testing.assert_array_equal(got["tokens"], expected["tokens"])
    np.testing.assert_allclose(got["logits"], expected["logits"], rtol=1e-6)


def test_prepare_makes_the_gpu_the_current_device_before_any_cuda_work(monkeypatch):
    # Triton launches its kernels (the attention and GEMMs of torch_triton, the autotuner's benchmarks) on the
    # current device, and the engine's events and synchronize act on it too: cuda:0 until it is set.
    import torch

    from xmfu.workloads.inference.torch_generate import prepare_generation

    class Stop(Exception):
        pass

    def set_device(device):
        raise Stop(str(device))

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    ctx = RunContext(run_config(), Platform("cuda", (gpu_device("NVIDIA H100 80GB HBM3", 132, index=3),), "test"))
    with pytest.raises(Stop, match="cuda:3"):
        prepare_generation(InferenceCase(TINY, "fp32", "prefill", 1, 8, 4), ctx, notes={})


def test_triton_attention_compiles_one_kernel_for_every_decode_position():
    """Triton specialises an int argument equal to 1 and one divisible by 16 (runtime/jit.py, specialize_impl):
    a decode step passes its position as the causal offset, so a position of another class than those the
    correctness pass and warm-up met would compile a new kernel inside a timed sample."""
    libtriton = pytest.importorskip("triton._C.libtriton")
    if not hasattr(libtriton, "native_specialize_impl"):  # Triton's C++ specialisation, newer than triton 3.2
        pytest.skip("this Triton has no triton._C.libtriton.native_specialize_impl")
    native_specialize_impl = libtriton.native_specialize_impl
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import JITFunction

    from xmfu.kernels.flash_attention import _attn_fwd

    jitted = _attn_fwd.fn if isinstance(_attn_fwd.fn, JITFunction) else JITFunction(_attn_fwd.fn.fn,
                                                                                   **_attn_fwd.fn.kwargs)
    param = next(p for p in jitted.params if p.name == "CAUSAL_OFFSET")
    kinds = {native_specialize_impl(BaseBackend, pos, False, not param.do_not_specialize,
                                    not param.do_not_specialize_on_alignment) for pos in (1, 16, 17, 512, 513)}
    assert len(kinds) == 1, kinds


def test_jax_generates_on_the_runs_device_index():
    # The row, the peak and the telemetry describe `device_index`; the work must run there too (issue 25, item 8:
    # it ran on local device 0 whatever the index). One local device here: index 7 is refused, never substituted.
    case = InferenceCase(TINY, "fp32", "decode", 2, 8, 4, check_steps=2)
    ctx = RunContext(run_config(device_index=7), Platform("cpu", (gpu_device("cpu", kind="cpu"),), "test"))
    with pytest.raises(RuntimeError, match="device_index 7: JAX sees 1 local device"):
        jax_backend.prepare(case, ctx)


def test_triton_decode_steps_run_the_split_kv_kernel_over_the_keys_the_flops_count(cpu_ctx, monkeypatch):
    """Each decode step's attention goes through kernels/flash_decoding.py with kv_len = position + 1: the keys
    `mean_context` counts for that step (arithmetic.py), no more (the tiled kernel read up to its query tile's
    causal bound); the prompt stays on the tiled kernel. The correctness gate covers the decode kernel."""
    from xmfu.kernels import flash_decoding

    seen = []
    real = flash_decoding.flash_decode

    def counted(q, k, v, kv_len, **kw):
        seen.append((q.shape[2], kv_len))
        return real(q, k, v, kv_len, **kw)

    monkeypatch.setattr(flash_decoding, "flash_decode", counted)
    case = InferenceCase(TINY, "fp32", "decode", 2, 8, 4, check_steps=2)
    prepared = _prepared("torch_triton", case, cpu_ctx)
    assert case.check(prepared.result(None)).ok
    steps = [p + 1 for p in range(case.prompt_len, case.prompt_len + case.check_steps)]
    assert seen == [(1, n) for n in steps for _ in range(TINY.n_layers)]
    assert sum(steps) / len(steps) == ar.mean_context(case.prompt_len, case.check_steps)  # the formula's keys
    assert "flash_decoding" in prepared.notes["decode_attention"]
