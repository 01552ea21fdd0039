"""Inference on the training step's model: one case per phase, batch and sequence lengths.

The model is the transformer workload's (the same presets, the same weights from the same seed, loaded at the
run's dtype: bf16 weights and KV cache for `bf16`, fp32 for `fp32`), generating greedily with fixed lengths (no
early stop), so every backend does the same work.

How a call maps to a sample (the engine times `fn`, one call per sample):

- `prefill`: one call is one forward over the B prompts of P tokens from position 0, writing their K and V into
  the preallocated cache and picking every sequence's first token (argmax of the last position's logits). All B
  first tokens exist when the call ends, so a sample is the batch's time to first token (TTFT), and the
  percentiles are over samples. Prompt tokens/s = B·P / median TTFT.
- `decode`: one call is one decode step of the B sequences: the token at position p goes in, its K and V are
  written at p, p + 1 keys are attended, and the argmax becomes the token at p + 1. Before every sample
  (`Prepared.before_sample`, outside the timed region) p moves on to the next position, cycling over P .. P+G-1,
  so consecutive samples are the G steps of a generation in order, at every cache length it sees, one step per
  sample (`Prepared.calls_per_sample = 1`): time per output token (TPOT) p50/p90/p99 come from these raw
  samples. A step is idempotent (it reads the token at p and writes position p and the token at p + 1 only), so
  the warm-up calls and JAX's drain call, which repeat the current step, change nothing. Generated tokens/s =
  B / median TPOT (per sequence: 1 / median TPOT); FLOPs and bytes per step are a generation's mean (both are
  linear in the cache length). Each step is timed alone and synchronised (CUDA events, block_until_ready): a
  step's host launch time shows in it wherever the device would wait for the host in a real loop too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from xmfu.harness.engine.declare import POSITIVE_INT, ConfigError, OneOf, as_list, setting
from xmfu.harness.engine.structured import parse_section
from xmfu.harness.machine.peaks import BandwidthPeak
from xmfu.workloads.inference import arithmetic as ar
from xmfu.workloads.inference.figures import latency, mbu_fields
from xmfu.workloads.transformer.spec import CONVENTIONS, ModelSpec, init_weights, model_from_config, model_params

PHASES = ("prefill", "decode")
DTYPES = tuple(ar.DTYPE_BYTES)


@dataclass(frozen=True)
class InferenceSettings:
    """`workload=inference`: the training step's model (same presets, same weights from the seed): prefill and greedy
    decode against a static KV cache. Pick the size with model=NAME; lists are swept (an OOM batch is a failed
    row)."""

    name: str = setting("inference", "the workload")
    model: Any = setting(None, "the preset's shapes: configs/workload/inference.yaml points it at the preset chosen "
                         "in the `model` group")
    phases: Any = setting(PHASES, "prefill: one forward over the prompts (TTFT) | decode: one token per step (TPOT)",
                          OneOf(PHASES))
    batch: Any = setting((1, 8, 32, 64), "sequences generated together", POSITIVE_INT)
    prompt_len: Any = setting((512,), "prompt tokens per sequence", POSITIVE_INT)
    gen_len: Any = setting((128,), "decode steps per sequence (fixed: no early stop); prefill caches are sized for "
                           "the longest", POSITIVE_INT)
    flop_convention: str = setting("palm", "prefill attention: palm (every score) | causal (halved); decode counts "
                                   "are exact", OneOf(CONVENTIONS))
    check_steps: int = setting(4, "decode steps checked (logits and greedy tokens) against the fp64 model",
                               POSITIVE_INT)


@dataclass(frozen=True)
class InferenceSpec:
    """One phase at one batch size and length. Pure data and formulas; `cases.InferenceCase` adds the check."""

    model: ModelSpec  # the preset as configured (its own batch and seq_len are the training step's, unused here)
    dtype: str
    phase: str
    batch: int
    prompt_len: int
    gen_len: int
    flop_convention: str = InferenceSettings.flop_convention
    check_steps: int = InferenceSettings.check_steps  # decode steps checked against the fp64 model
    seed: int = 0

    workload: ClassVar[str] = "inference"

    @property
    def cache_len(self) -> int:
        """Slots per sequence in the static cache: the prompt and every generated position."""
        return self.prompt_len + self.gen_len

    @property
    def dtype_bytes(self) -> int:
        return ar.DTYPE_BYTES[self.dtype]

    @property
    def case_id(self) -> str:
        lengths = f"p{self.prompt_len}" + (f"-g{self.gen_len}" if self.phase == "decode" else "")
        return f"inference-{self.dtype}-{self.model.name}-{self.phase}-b{self.batch}-{lengths}"

    def params(self) -> dict[str, Any]:
        model = {k: v for k, v in model_params(self.model).items() if k not in ("batch", "seq_len")}
        return {**model, "params": self.model.param_counts()["total"], "phase": self.phase, "batch": self.batch,
                "prompt_len": self.prompt_len, "gen_len": self.gen_len, "cache_len": self.cache_len,
                "check_steps": self.check_steps}

    @property
    def context(self) -> float:
        return ar.mean_context(self.prompt_len, self.gen_len)

    def flops(self) -> float:
        if self.phase == "prefill":
            return ar.prefill_flops(self.model, self.batch, self.prompt_len, self.flop_convention)
        return ar.decode_step_flops(self.model, self.batch, self.context)

    def min_flops(self) -> float:
        """The roofline floor's FLOPs (harness/machine/roofline.py): prefill's causal count, the lower triangle a
        kernel must compute, whatever the convention credits (palm counts every score)."""
        if self.phase == "prefill":
            return ar.prefill_flops(self.model, self.batch, self.prompt_len, "causal")
        return self.flops()

    def bytes_moved(self) -> float:
        if self.phase == "prefill":
            return ar.prefill_bytes(self.model, self.batch, self.prompt_len, self.dtype_bytes)
        return ar.decode_step_bytes(self.model, self.batch, self.context, self.dtype_bytes)

    def work_units(self) -> dict[str, float]:
        """Per call: prefill makes B·P prompt tokens; a decode step one generated token per sequence."""
        if self.phase == "prefill":
            return {"prompt_tokens": float(self.batch * self.prompt_len)}
        return {"generated_tokens": float(self.batch), "generated_tokens_per_sequence": 1.0}

    def figures(self, time_s: dict[str, Any] | None, samples: list[list[float]], membw: BandwidthPeak,
                invalid_timing: str | None) -> dict[str, Any]:
        """The engine's `figures` hook: latency percentiles from the raw samples, MBU, the memory formulas."""
        out: dict[str, Any] = {
            "weights_bytes": ar.weight_bytes(self.model, self.dtype_bytes),
            "kv_cache_bytes": ar.kv_cache_bytes(self.model, self.batch, self.cache_len, self.dtype_bytes)}
        flat = [v for repeat in samples for v in repeat]
        if self.phase == "prefill":
            out["ttft_s"] = latency(flat)
            out.update(mbu_fields(None, None, membw, "prefill is compute-bound: see mfu (MBU is a decode figure)"))
            return out
        out["tpot_s"] = latency(flat)
        if out["tpot_s"]:
            out["tpot_s"]["generations"] = sum(len(r) for r in samples) / self.gen_len
        median = time_s["median"] if time_s else None
        invalid = f"timing not valid: {invalid_timing}" if invalid_timing else None
        out.update(mbu_fields(self.bytes_moved(), median, membw, invalid))
        return out

    def weights(self) -> dict[str, np.ndarray]:
        return init_weights(self.model, self.seed)  # the training step's weights: same preset, same seed

    def prompts(self) -> np.ndarray:
        """(batch, prompt_len) int32 random tokens; row i is the same for every batch size (drawn row-major)."""
        rng = np.random.default_rng(self.seed + 2)
        return rng.integers(0, self.model.vocab, size=(self.batch, self.prompt_len)).astype(np.int32)

    def check_rows(self) -> None:
        return None  # the check always covers sequence 0's prefill and first `check_steps` decode steps


def decode_cycle(case: InferenceSpec, step: Callable[[int], Any]) -> tuple[Callable[[], Any], Callable[[], None]]:
    """The decode row's callable (one step at the current position) and its `before_sample` hook (move to the
    next position, P .. P+G-1 cyclically). Starting on the last position makes the first sample the first step."""
    p0, g = case.prompt_len, case.gen_len
    state = {"pos": p0 + g - 1}

    def advance() -> None:
        state["pos"] = p0 + (state["pos"] - p0 + 1) % g

    return (lambda: step(state["pos"])), advance


def _lengths(s: InferenceSettings, key: str) -> list[int]:
    values = as_list(getattr(s, key))
    if not values:
        raise ConfigError(f"workload.{key}", "is empty", "a positive integer or a list of them")
    return values


def parse_specs(workload: Mapping[str, Any], dtype: str, seed: int) -> list[InferenceSpec]:
    """Prefill cases per (batch, prompt_len), decode cases per (batch, prompt_len, gen_len), in that order."""
    s = parse_section("workload", InferenceSettings, workload)
    if dtype not in DTYPES:
        raise ConfigError("dtype", f"{dtype} is not an inference dtype here", ", ".join(DTYPES))
    if not isinstance(s.model, Mapping):
        raise ConfigError("model", "no model chosen", "model=tiny | 125m | 350m | 1b | 3b | 8b")
    model = model_from_config(s.model)
    if model.moe:
        raise ConfigError("model", f"{model.name} is a mixture of experts; inference runs the dense decoder only",
                          "a dense preset: model=tiny | 125m | 350m | 1b | 3b | 8b")
    phases = as_list(s.phases)
    if not phases:  # no phase is no case: refused here as bad input (exit 2), not found later as an empty run (1)
        raise ConfigError("workload.phases", "is empty", f"one or more of {', '.join(PHASES)}")
    batches, prompts, gens = (_lengths(s, k) for k in ("batch", "prompt_len", "gen_len"))
    if s.check_steps > min(gens):
        raise ConfigError("workload.check_steps", f"{s.check_steps} exceeds the shortest gen_len {min(gens)}",
                          f"1 .. {min(gens)}")
    cases = []
    for b in batches:
        for p in prompts:
            common = {"model": model, "dtype": dtype, "batch": b, "prompt_len": p, "flop_convention": s.flop_convention,
                      "check_steps": s.check_steps, "seed": seed}
            if "prefill" in phases:  # its cache is sized for the longest generation, as a server would
                cases.append(InferenceSpec(phase="prefill", gen_len=max(gens), **common))
            if "decode" in phases:
                cases += [InferenceSpec(phase="decode", gen_len=g, **common) for g in gens]
    return cases
