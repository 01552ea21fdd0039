"""The parts of the GPU reference set (benchmarks/gpu_reference.py) and the minutes each is expected to take.

A part is one `xmfu run` (one bundle), sized to finish well within its budget on one H100; the budget (at most 8
minutes, under a GPU node's 10-minute cap on one command) is the hard guarantee: gpu_reference.py stops a part at
its budget, keeping a partial bundle.

The expected minutes are ESTIMATES, NOT MEASUREMENTS: no part has run on a GPU yet. `estimate` derives them from
the cases the part's config expands into, priced with the rates below (each stated with its source or marked
assumed): the timing protocol's budget per case, each timed call's FLOPs or bytes at an H100 rate, each backend's
preparation (compiling, autotuning) per case, the host's work (inputs and weights drawn with numpy, the fp64
reference checks) and the start of the process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

MAX_BUDGET_S = 480.0  # a GPU node (or this project's lent H100) caps one command at 10 minutes: 8 for the part,
# the rest for the script's start, the report and the summary

ESTIMATE_SHARE = 0.8  # a part's estimate may take at most this share of its budget (the estimates are not measured)

# What a part is expected to cost on one H100 SXM: the estimate's rates (not measured on a GPU). The datasheet
# figures are the project's peak table's (harness/machine/peaks.yaml, nvidia-h100-sxm: bf16 989, fp8 1979 TFLOP/s,
# 3.35 TB/s); the shares of them are assumptions, but for the matmul's.
H100 = "nvidia-h100-sxm"
ACHIEVABLE_BF16 = 794.5e12  # the maximum achievable H100 SXM bf16 matmul that mamf-finder measured (stas00/ml-
# engineering, compute/accelerator/README.md): 80.3% of the datasheet's 989
OTHER_SHARE = 0.4  # assumed: attention, training and prefill at 40% of the bf16 datasheet peak
HBM_SHARE = 0.7  # assumed: decode and collectives at 70% of the datasheet's HBM bandwidth
START_S = 30.0  # per xmfu run, assumed: interpreter, torch/JAX imports (3-5 s measured on the project's 2-core
# machine), CUDA and JAX client start-up, environment capture
TORCHRUN_S = 15.0  # torchrun's rendezvous and a second interpreter per rank, assumed
LAUNCH_S = 20e-6  # assumed: the shortest call (launch and synchronisation)
CHECK_CALLS = 2  # untimed calls per backend besides the warm-up: the correctness check's, the first call's
HOST_VALUES_PER_S = 5e7  # numpy drawing inputs and weights (uniform_inputs, standard_normal), one thread: measured
# on the project's 2-core machine, shared with other jobs (5.6e7-5.9e7 values/s best of 3 at 8192^2, 3.3e7-3.6e7
# single runs); a GPU node's cores are likely faster
HOST_FP64_FLOPS = 1e11  # assumed: the fp64 reference checks on a GPU node's 16 or more cores (1.7e10 measured on
# the project's 2 cores with numpy's BLAS)
HOST_COPY_BPS = 5e9  # assumed: weights converted and copied to the device, per backend and case
COLLECTIVE_SAMPLE_S = 2e-3  # assumed: a collectives sample's barrier and data check (fixed plans)

# Preparation per case and backend (compiling, autotuning, building the model), seconds: ASSUMED, not measured
# (no GPU was available); a backend not named here takes DEFAULT_PREPARE_S.
DEFAULT_PREPARE_S = 0.5  # inputs to the device, a library kernel chosen
PREPARE_S = {
    ("matmul", "triton"): 10.0,  # 10 autotune configs (kernels/matmul.py), compiled and timed for each shape
    ("matmul", "triton_persistent"): 16.0,  # 16 configs on NVIDIA (kernels/matmul_persistent.py, tutorial 09's)
    ("matmul", "jax"): 2.0,
    ("matmul", "torch_compile"): 30.0,  # Inductor max-autotune: ATen, Triton templates (and CUTLASS/CK) per shape
    ("attention", "triton"): 3.0,  # 4-5 configs (kernels/flash_attention.py) timed per shape, compiled per mask
    ("attention", "triton_fa2"): 3.0,  # 5 forward, 4 backward configs (kernels/flash_attention_fa2.py), likewise
    ("attention", "jax"): 2.0, ("attention", "jax_cudnn"): 2.0,
    ("matmul", "jax_pallas"): 2.0, ("attention", "jax_pallas"): 3.0,  # Pallas -> Triton compile (fwd + bwd kernels)
    ("attention", "torch_flex"): 10.0,  # Inductor compiles FlexAttention's template per shape, mask and pass
    # helion's 'quick' autotune (workloads/helion_support.py), per shape: compiled and timed for a few configs
    ("matmul", "helion"): 60.0, ("attention", "helion"): 20.0,
    ("transformer", "torch"): 5.0, ("transformer", "torch_compile"): 60.0,  # Inductor compiles one block, reused
    ("transformer", "torch_triton"): 60.0, ("transformer", "jax"): 60.0,
    ("inference", "torch"): 2.0, ("inference", "torch_compile"): 40.0, ("inference", "torch_triton"): 20.0,
    ("inference", "jax"): 20.0,  # each compiles the row's own shape (prefill, or decode with CUDA graphs)
    ("collectives", "torch_dist"): 0.2,
}


@dataclass(frozen=True)
class Part:
    name: str
    what: str
    args: tuple[str, ...]  # `xmfu run` overrides, both sizes
    timing: tuple[str, ...]  # added on an accelerator: the protocol that keeps the part within its budget
    smoke: tuple[str, ...]  # added without an accelerator: sizes that finish in seconds
    budget_s: float = MAX_BUDGET_S  # SIGTERM before it, SIGKILL at it (gpu_reference.py)
    ranks: bool = False  # one process per GPU under torchrun (two gloo processes on a CPU)
    smoke_env: tuple[tuple[str, str], ...] = field(default=())  # environment added at smoke sizes
    achievable_from: str | None = None  # the mamf part whose achievable peak this part's rows are divided by

    def overrides(self, smoke: bool) -> list[str]:
        return [*self.args, *(self.smoke if smoke else self.timing)]


MAMF_SWEEP = ("mamf.m=[4096,8192,16384]", "mamf.n=[4096,8192,16384]", "mamf.k=[4096,8192,16384]")
MATMUL_SMOKE = ("workload.sizes=[128]", "timing=quick")
MODEL_SMOKE = ("model=tiny", "scale=smoke", "workload.batch=[1,4]", "timing=quick")  # the smoke preset's batches


def _mamf(dtype: str, what: str, backends: str = "torch") -> Part:
    return Part(f"mamf-{dtype}", what, ("experiment=mamf", f"dtype={dtype}", f"backends=[{backends}]",
                                        "workload.sizes=[8192]", *MAMF_SWEEP),
                ("timing.max_time_s=2",), ("mamf.m=[128,256]", "mamf.n=[256]", "mamf.k=[256]", *MATMUL_SMOKE))


def _attention(mode: str, head_dim: int, causal: bool) -> Part:
    """FlashAttention's benchmark shapes (6 batch x seq pairs) at one head dimension, pass and mask: one part per
    mask, since both masks through eight backends would not fit one part's budget at head dim 128."""
    passes = {"fwd": "forward", "fwd_bwd": "forward+backward"}[mode]
    mask = "causal" if causal else "full"
    return Part(f"attention-{mode.replace('_', '-')}-d{head_dim}-{mask}",
                f"attention shoot-out, {passes}, head dim {head_dim}, {mask} mask, at FlashAttention's benchmark "
                "shapes: Triton (triton, triton_fa2), SDPA (auto, flash, cuDNN), JAX (XLA, cuDNN, Pallas), "
                "FlashAttention, AITER (ROCm), speedups vs SDPA",
                ("experiment=attention-shootout", f"workload.mode=[{mode}]", f"workload.head_dim=[{head_dim}]",
                 f"workload.causal=[{str(causal).lower()}]"),
                ("timing.max_time_s=3",),
                ("workload.batch_seq=[[1,48]]", "workload.model_dim=128", "timing=quick"))


def _inference(model: str, batch: str, backends: str, what: str, suffix: str = "") -> Part:
    return Part(f"inference-{model}{suffix}", what, ("workload=inference", f"model={model}", "dtype=bf16",
                                                     f"workload.batch=[{batch}]", f"backends=[{backends}]"),
                ("timing.max_time_s=5",), MODEL_SMOKE)


PARTS = (
    _mamf("bf16", "maximum achievable bf16 matmul: 27 shapes (m, n, k each 4096, 8192, 16384) through torch, then "
                  "torch at 8192^3 against it"),
    _mamf("fp8", "maximum achievable fp8 matmul, the same sweep (torch._scaled_mm; sm89+ and gfx942+ only), then "
                 "torch, Triton and JAX fp8 at 8192^3 against it", "torch,triton,jax"),
    Part("matmul", "torch vs Triton (tutorial-03 and persistent kernels) vs JAX (XLA, Pallas) vs torch.compile "
         "max-autotune vs Helion bf16 matmul at 4096^3 and 8192^3 (against mamf-bf16's achievable peak when its "
         "bundle is there)",
         ("workload=matmul", "dtype=bf16",
          "backends=[torch,triton,triton_persistent,jax,jax_pallas,torch_compile,helion]",
          "workload.sizes=[4096,8192]"),
         (), MATMUL_SMOKE, achievable_from="mamf-bf16"),
    *(_attention(mode, head_dim, causal) for mode in ("fwd", "fwd_bwd") for head_dim in (64, 128)
      for causal in (False, True)),
    Part("attention-compiled", "FlexAttention (torch.compile, causal through a block mask) and Helion (forward "
         "only) against SDPA at two of the shoot-out's shapes (4 x 4096, 1 x 16384), head dim 128, forward and "
         "forward+backward (each case compiles)",
         ("experiment=attention-shootout", "backends=[torch_sdpa,torch_flex,helion]", "workload.head_dim=[128]",
          "workload.batch_seq=[[4,4096],[1,16384]]"),
         ("timing.max_time_s=3",), ("workload.batch_seq=[[1,48]]", "workload.model_dim=128", "timing=quick")),
    Part("training-1b", "one training step of the 1b preset on every backend (torch, torch.compile, xmfu's Triton "
         "kernels, JAX)", ("workload=transformer", "model=1b", "dtype=bf16"), (), ("model=tiny", "timing=quick")),
    _inference("1b", "1,16,64", "torch,jax", "prefill (TTFT, MFU) and decode (TPOT, MBU) of the 1b preset, torch "
               "and JAX, batch 1, 16, 64"),
    _inference("1b", "1,16", "torch_compile,torch_triton", "the same through torch.compile and xmfu's Triton "
               "kernels, batch 1 and 16 (each compiles per shape)", suffix="-compiled"),
    _inference("8b", "16", "torch,jax", "prefill and decode of the 8b preset, torch and JAX, batch 16 (drawing "
               "8e9 weights and the fp64 check take most of its time)"),
    Part("collectives-torch", "collectives over the GPUs present through torch.distributed (one rank per GPU)",
         ("workload=collectives", "backends=[torch_dist]"), (), ("scale=smoke",), ranks=True),
    Part("collectives-jax", "collectives over every device through JAX",
         ("workload=collectives", "backends=[jax]"), (), ("scale=smoke",),
         smoke_env=(("XLA_FLAGS", "--xla_force_host_platform_device_count=4"),)),
)
BY_NAME = {p.name: p for p in PARTS}


@dataclass(frozen=True)
class Estimate:
    """A part's expected seconds on one H100, by where they go. Estimated, not measured."""

    cases: int  # (case, backend) pairs
    terms: dict[str, float]  # start, timing (the protocol's budget), device (untimed calls), prepare, host

    @property
    def minutes(self) -> float:
        return sum(self.terms.values()) / 60


@cache
def h100() -> dict[str, Any]:
    """The H100 SXM's entry of the peak table."""
    from xmfu.harness.machine.peaks import load_table

    return next(e for e in load_table()["devices"] if e["id"] == H100)


def call_s(case: Any) -> float:
    """One call's seconds on an H100: FLOPs at the rate for its kind, or bytes at HBM speed, whichever is longer.
    Matmul runs at the achievable bf16 rate, fp8 at the same share of its own datasheet peak (assumed)."""
    peaks, bf16 = h100()["tflops"], h100()["tflops"]["bf16"] * 1e12
    rate = OTHER_SHARE * bf16
    if case.workload == "matmul":
        rate = ACHIEVABLE_BF16 * peaks.get(case.dtype, peaks["bf16"]) / peaks["bf16"]
    return max(case.flops() / rate, case.bytes_moved() / (HBM_SHARE * h100()["hbm_tbps"] * 1e12), LAUNCH_S)


def timing_s(case: Any, timing: Any, backends: int) -> float:
    """The timing protocol's share of a case. Sampled cases: the budget `max_time_s` (all backends together, warm-up
    included), or the minimum samples where they take longer, plus the round that overruns it (harness/engine/
    sampler.py). Fixed plans (collectives): warm-up plus samples of `iters` operations, every rank alike."""
    t = call_s(case)
    if case.workload == "collectives":
        return backends * ((case.warmup + case.samples * case.iters) * t + case.samples * COLLECTIVE_SAMPLE_S)
    least = backends * (timing.warmup_min_iters + timing.min_samples) * t
    return max(timing.max_time_s, least) + backends * timing.round_samples * t


def model_params(model: Any) -> int:
    return sum(math.prod(shape) for shape in model.weight_shapes().values())


def _matmul_host(cases: Sequence[Any], backends: int) -> float:
    """Inputs drawn per case; each backend's check recomputes its rows (64 at most) in fp64 (workloads/matmul/
    spec.py check_rows)."""
    values = sum(c.m * c.k + c.k * c.n for c in cases)
    check = sum(2.0 * min(c.m, 64) * c.k * c.n for c in cases) * backends
    return values / HOST_VALUES_PER_S + check / HOST_FP64_FLOPS


def _attention_host(cases: Sequence[Any], backends: int) -> float:
    """q, k, v and the output gradient drawn per case; each backend's check recomputes two kv-head groups in fp64
    (workloads/attention/spec.py check_rows), at the case's own FLOPs per head."""
    values = sum(c.batch * c.head_dim * (2 * c.heads * c.seq_q + 2 * c.kv_heads * c.seq_kv) for c in cases)
    check = sum(c.flops() * min(1.0, 2 * c.group / (c.batch * c.heads)) for c in cases) * backends
    return values / HOST_VALUES_PER_S + check / HOST_FP64_FLOPS


def _model_host(cases: Sequence[Any], backends: int) -> float:
    """The weights drawn once a run (lru-cached), copied to each backend once a case; the fp64 reference once a run
    (its first sequence: 6 FLOPs per parameter and token for a training step's 128 tokens, 2 for a prefill and the
    checked decode steps; assumed the same for every backend, as the greedy tokens agree)."""
    params = model_params(cases[0].model)
    if cases[0].workload == "transformer":
        reference = 6.0 * params * min(cases[0].model.seq_len, 128)
    else:
        reference = 2.0 * params * max(c.prompt_len + c.check_steps for c in cases)
    copies = 4.0 * params * len(cases) * backends
    return params / HOST_VALUES_PER_S + reference / HOST_FP64_FLOPS + copies / HOST_COPY_BPS


HOST: dict[str, Callable[[Sequence[Any], int], float]] = {
    "matmul": _matmul_host, "attention": _attention_host, "transformer": _model_host, "inference": _model_host,
}


@cache
def estimate(name: str) -> Estimate:
    """The part's expected seconds on one H100, from the cases its GPU config expands into (composed as `xmfu run`
    would; raises the config's error where it does not compose)."""
    from xmfu.harness.config.hydra_app import validate_job
    from xmfu.harness.run import plan_phases
    from xmfu.workloads.catalog import build_registry

    part = BY_NAME[name]
    registry = build_registry()
    cfg = validate_job(part.overrides(smoke=False), registry)
    terms = {"start": START_S + (TORCHRUN_S if part.ranks else 0.0), "timing": 0.0, "device": 0.0,
             "prepare": 0.0, "host": 0.0}
    pairs = 0
    for phase in plan_phases(cfg, registry):
        backends = len(phase.backends)
        pairs += backends * len(phase.cases)
        for case in phase.cases:
            terms["timing"] += timing_s(case, cfg.timing, backends)
            terms["device"] += backends * CHECK_CALLS * call_s(case)
            terms["prepare"] += sum(PREPARE_S.get((case.workload, b), DEFAULT_PREPARE_S) for b in phase.backends)
        if phase.cases and phase.cases[0].workload in HOST:
            terms["host"] += HOST[phase.cases[0].workload](phase.cases, backends)
    return Estimate(pairs, terms)
