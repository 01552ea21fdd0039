"""A Llama-style decoder and one training step of it: parameter counts, FLOP conventions, weights.

Architecture: token embedding -> n_layers x [RMSNorm -> GQA attention with rotary embeddings -> residual,
RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> output layer (untied) -> cross-entropy. No biases.
A mixture-of-experts preset (n_experts > 0) replaces the SwiGLU MLP of every block after the first `dense_layers`
by a router, n_experts SwiGLU experts of width expert_hidden of which each token uses top_k, and n_shared_experts
experts every token uses (one SwiGLU of width n_shared_experts x expert_hidden); its loss adds the load-balancing
term (moe.py).
One training step = forward, backward and an AdamW update, on a synthetic token batch.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from xmfu.harness.engine.declare import (
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    ConfigError,
    Number,
    OneOf,
    as_list,
    required,
    setting,
)
from xmfu.harness.engine.structured import parse_section

CONVENTIONS = ("palm", "causal")
FP8_RECIPES = ("none", "tensorwise", "rowwise")  # fp8.py
DTYPES = ("fp32", "bf16")  # bf16 = mixed precision: fp32 master weights, bf16 matmuls
CHECK_TOKENS = 128  # the correctness check runs the first sequence's first tokens (the model is causal)
PARALLEL = ("none", "ddp", "fsdp", "dp", "ep")  # none: the single-device step, every strategy's baseline
SCALINGS = ("weak", "strong")  # weak: `batch` per device (global = batch x devices); strong: `batch` is global
ADAMW = {"b1": 0.9, "b2": 0.95, "eps": 1e-8, "weight_decay": 0.1}  # every backend's AdamW (optax's names)
INIT_STD = 0.02  # normal(0, 0.02) for every matrix, as GPT-2 and Llama reference code do; norms start at 1


@dataclass(frozen=True)
class ModelSpec:
    """`model=NAME` (configs/model/): a preset's shapes; every field up to `batch` is the preset's to state; the
    mixture-of-experts fields stay at their defaults (0 experts) in a dense preset."""

    name: str = required("the preset's name, in every case id: letters, digits, . _ + -; no / or ..")
    vocab: int = required("vocabulary size", POSITIVE_INT)
    d_model: int = required("model width", POSITIVE_INT)
    n_layers: int = required("decoder blocks", POSITIVE_INT)
    n_heads: int = required("query heads", POSITIVE_INT)
    n_kv_heads: int = required("key/value heads (GQA when fewer than n_heads)", POSITIVE_INT)
    ffn_hidden: int = required("SwiGLU hidden width", POSITIVE_INT)
    seq_len: int = required("tokens per sequence", POSITIVE_INT)
    batch: int = required("sequences per step (per device under weak scaling)", POSITIVE_INT)
    rope_theta: float = setting(10000.0, "rotary embedding base", POSITIVE)
    norm_eps: float = setting(1e-5, "RMSNorm epsilon", POSITIVE)
    n_experts: int = setting(0, "routed experts per MoE block; 0: a dense model", NON_NEGATIVE_INT)
    top_k: int = setting(2, "MoE: routed experts each token uses", POSITIVE_INT)
    expert_hidden: int = setting(0, "MoE: each expert's SwiGLU hidden width (0: ffn_hidden)", NON_NEGATIVE_INT)
    n_shared_experts: int = setting(0, "MoE: experts every token uses, one SwiGLU of n x expert_hidden",
                                    NON_NEGATIVE_INT)
    dense_layers: int = setting(0, "MoE: the first blocks keep the dense SwiGLU of ffn_hidden", NON_NEGATIVE_INT)
    aux_loss_coef: float = setting(0.01, "MoE: weight of the load-balancing term in the loss", NON_NEGATIVE)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def moe(self) -> bool:
        return self.n_experts > 0

    @property
    def expert_width(self) -> int:
        return self.expert_hidden or self.ffn_hidden

    def is_moe_layer(self, i: int) -> bool:
        return self.moe and i >= self.dense_layers

    def _ffn_shapes(self, i: int) -> dict[str, tuple[int, ...]]:
        """Block i's MLP: the dense SwiGLU, or the router, the routed experts stacked (E, out, in) and the shared
        expert."""
        d, p = self.d_model, f"layers.{i}.feed_forward."
        if not self.is_moe_layer(i):
            f = self.ffn_hidden
            return {p + "w1.weight": (f, d), p + "w3.weight": (f, d), p + "w2.weight": (d, f)}
        e, f = self.n_experts, self.expert_width
        out = {p + "router.weight": (e, d), p + "experts.w1": (e, f, d), p + "experts.w3": (e, f, d),
               p + "experts.w2": (e, d, f)}
        if self.n_shared_experts:
            fs = self.n_shared_experts * f
            out.update({p + "shared.w1.weight": (fs, d), p + "shared.w3.weight": (fs, d),
                        p + "shared.w2.weight": (d, fs)})
        return out

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter, named as the torch model's state_dict, in torch's (out, in) layout."""
        d, kv = self.d_model, self.n_kv_heads * self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"tok_embeddings.weight": (self.vocab, d)}
        for i in range(self.n_layers):
            p = f"layers.{i}."
            shapes.update({p + "attention_norm.weight": (d,), p + "attention.wq.weight": (d, d),
                           p + "attention.wk.weight": (kv, d), p + "attention.wv.weight": (kv, d),
                           p + "attention.wo.weight": (d, d), p + "ffn_norm.weight": (d,)})
            shapes.update(self._ffn_shapes(i))
        shapes.update({"norm.weight": (d,), "output.weight": (self.vocab, d)})
        return shapes

    def param_counts(self) -> dict[str, int]:
        """Parameter counts; `active_*` are those one token's forward multiplies: every parameter but the routed
        experts, of which top_k (the same as the totals for a dense model)."""
        sizes = {n: math.prod(s) for n, s in self.weight_shapes().items()}
        total = sum(sizes.values())
        embedding = sizes["tok_embeddings.weight"]
        blocks = sum(v for n, v in sizes.items() if n.startswith("layers."))
        routed = sum(v for n, v in sizes.items() if ".experts." in n)
        inactive = routed - routed * self.top_k // self.n_experts if self.moe else 0  # each layer's E experts: k used
        return {"total": total, "embedding": embedding, "non_embedding": total - embedding, "blocks": blocks,
                "active_non_embedding": total - embedding - inactive, "active_blocks": blocks - inactive}


# A model's name is part of every case id, and a case id part of file names in the bundle (a profiler trace is
# `<case_id>.<backend>.trace.json`): a plain name, so that no `/`, `..` or leading dot can point outside it.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def model_from_config(data: Mapping[str, Any]) -> ModelSpec:
    model = parse_section("model", ModelSpec, data)
    if not MODEL_NAME.fullmatch(str(model.name)) or ".." in str(model.name):
        raise ConfigError("model.name", f"{model.name!r} is not a plain name (it becomes part of case ids and of "
                          "file names in the bundle)", "letters, digits and . _ + -, starting with a letter or "
                          "digit, without '..'")
    if model.d_model % model.n_heads or model.n_heads % model.n_kv_heads:
        raise ConfigError("model", "d_model must be a multiple of n_heads, and n_heads of n_kv_heads",
                          "e.g. d_model=768 n_heads=12 n_kv_heads=4")
    if (model.d_model // model.n_heads) % 2:
        raise ConfigError("model.n_heads", "gives an odd head dim; rotary embeddings need an even one",
                          "d_model / n_heads even")
    if model.moe and (model.top_k > model.n_experts or model.dense_layers >= model.n_layers):
        raise ConfigError("model", f"top_k={model.top_k} of n_experts={model.n_experts} with dense_layers="
                          f"{model.dense_layers} of n_layers={model.n_layers}: a token cannot use more experts than "
                          "there are, and at least one block must be a mixture of experts",
                          "top_k <= n_experts and dense_layers < n_layers")
    return model


MOE_FIELDS = ("n_experts", "top_k", "expert_hidden", "n_shared_experts", "dense_layers", "aux_loss_coef")


def model_params(model: ModelSpec) -> dict[str, Any]:
    """A preset's fields as a row's params: a dense preset's without the mixture-of-experts fields, so that its rows
    keep the params (and comparability key) they had before those fields existed."""
    out = asdict(model)
    return out if model.moe else {k: v for k, v in out.items() if k not in MOE_FIELDS}


@dataclass(frozen=True)
class TransformerSettings:
    """`workload=transformer`: one training step (forward, backward, AdamW) of a Llama-style decoder; pick the size
    with model=NAME. Across devices (README "Distributed training step"): none = one device; torch: ddp, fsdp (under
    torchrun or Slurm, one process per device); JAX: dp, fsdp (over jax.devices()). A list of strategies is swept;
    `none` always runs first, as every strategy's baseline; one a backend does not have is skipped with the
    reason. ep (torch): a mixture of experts' experts split over the ranks, all-to-all-v dispatch and combine."""

    name: str = setting("transformer", "the workload")
    model: Any = setting(None, "the preset's shapes: configs/workload/transformer.yaml points it at the preset "
                         "chosen in the `model` group")
    flop_convention: str = setting("palm", "palm (6N + 12·L·H·Dh·S per token) | causal (attention term halved)",
                                   OneOf(CONVENTIONS))
    activation_checkpointing: bool = setting(False, "recompute each block in the backward; rows then add hardware "
                                             "FLOPs (HFU)")
    lr: Number = setting(3e-4, "AdamW's learning rate", POSITIVE)
    batch: Any = setting(None, "null: the preset's batch; a list sweeps batch sizes (an OOM is a failed row)",
                         POSITIVE_INT)
    parallel: Any = setting("none", "none | ddp | fsdp (torch) | dp | fsdp (JAX) | ep (both: a mixture of experts' "
                            "experts split over the ranks), or a list of them",
                            OneOf(PARALLEL))
    scaling: Any = setting("weak", "weak: `batch` per device (global = batch x devices) | strong: `batch` is "
                           "global", OneOf(SCALINGS))
    warmup: int = setting(3, "distributed steps: untimed steps first, the same on every rank", POSITIVE_INT)
    samples: int = setting(10, "distributed steps: samples per case, the same on every rank", POSITIVE_INT)
    timeout_s: Number = setting(300, "a collective (or a rank joining) slower than this ends the run with a partial "
                                "bundle", POSITIVE)
    profile: bool = setting(False, "torch: a profiler trace (Chrome JSON) of one step per case, kept in the bundle")
    fp8: Any = setting("none", "dtype=bf16 with fp8 linear layers (fp8.py): none | tensorwise | rowwise (torchao's "
                       "recipes; torch needs torchao), or a list of them", OneOf(FP8_RECIPES))


@dataclass(frozen=True)
class TrainSpec:
    """One training step to run: the model, dtype and FLOP convention, with its formulas and its inputs.
    Pure data and formulas; `cases.TrainCase` adds the fp64 correctness check."""

    model: ModelSpec  # model.batch: per device under weak scaling, global under strong (single device: both)
    dtype: str
    flop_convention: str = TransformerSettings.flop_convention
    activation_checkpointing: bool = TransformerSettings.activation_checkpointing
    lr: float = TransformerSettings.lr
    seed: int = 0
    parallel: str = TransformerSettings.parallel
    scaling: str = TransformerSettings.scaling
    world_size: int | None = 1  # devices the step spans; None until a distributed backend settles it
    warmup: int = TransformerSettings.warmup  # distributed steps: untimed steps, then `samples` samples
    samples: int = TransformerSettings.samples
    timeout_s: float = TransformerSettings.timeout_s  # a collective (or a rank joining) slower than this ends the run
    profile: bool = TransformerSettings.profile  # torch: a profiler trace of one step, kept in the bundle
    fp8: str = TransformerSettings.fp8  # none, or the recipe of the fp8 linear layers (fp8.py)

    workload: ClassVar[str] = "transformer"

    @property
    def distributed(self) -> bool:
        return self.parallel != "none"

    @property
    def devices(self) -> int:
        return self.world_size or 1

    @property
    def global_batch(self) -> int:
        return self.model.batch * self.devices if self.scaling == "weak" else self.model.batch

    @property
    def per_device_batch(self) -> int:
        """Sequences each device runs (strong scaling: the global batch split evenly; see `split_problem`)."""
        return self.model.batch if self.scaling == "weak" else self.model.batch // self.devices

    def split_problem(self) -> str | None:
        """Why this batch cannot be spread over the devices, or None."""
        if self.scaling == "strong" and self.model.batch % self.devices:
            return (f"strong scaling: a global batch of {self.model.batch} does not split evenly over "
                    f"{self.devices} devices")
        return None

    def on_devices(self, world_size: int) -> TrainSpec:
        """This step as it runs on `world_size` devices."""
        return replace(self, world_size=world_size)

    @property
    def tokens(self) -> int:
        """Tokens of one step over all devices (the global batch)."""
        return self.global_batch * self.model.seq_len

    @property
    def case_id(self) -> str:
        remat = "-remat" if self.activation_checkpointing else ""
        strategy = f"-{self.parallel}-{self.scaling}" if self.distributed else ""
        fp8 = f"-fp8-{self.fp8}" if self.fp8 != "none" else ""
        return (f"transformer-{self.dtype}-{self.model.name}-b{self.model.batch}-s{self.model.seq_len}{remat}{fp8}"
                f"{strategy}")

    def params(self) -> dict[str, Any]:
        """The single-device step keeps its earlier params (and comparability key); a distributed one adds
        its strategy, scaling and world size, so `compare` refuses rows that differ in any of them."""
        counts = self.model.param_counts()
        out = {**model_params(self.model), "params": counts["total"],
               "activation_checkpointing": self.activation_checkpointing, "lr": self.lr}
        if self.model.moe:
            out["active_params"] = counts["active_non_embedding"] + counts["embedding"]
        if self.fp8 != "none":  # only fp8 rows name a recipe: a bf16 row keeps its earlier params
            out["fp8"] = self.fp8
        if self.distributed:
            out.update({"parallel": self.parallel, "scaling": self.scaling, "world_size": self.world_size,
                        "global_batch": self.global_batch if self.world_size else None,
                        "per_device_batch": self.per_device_batch if self.world_size else None})
        return out

    def _attention_per_token(self) -> float:
        # 12·L·H·Dh·S per token for forward+backward: QKᵀ and PV, 2 FLOPs per multiply-add, x3 for the
        # backward. `palm` counts every score (PaLM appendix B, nanoGPT, torchtitan); `causal` halves it
        # (Megatron-LM): only the lower triangle is computed.
        m = self.model
        full = 12.0 * m.n_layers * m.n_heads * m.head_dim * m.seq_len
        return full if self.flop_convention == "palm" else full / 2

    def global_flops(self) -> float:
        """Model FLOPs of one step over all devices: 6·N_active-non-embedding + attention, per token (recompute not
        counted). A dense model's active parameters are all of them; a mixture of experts counts the parameters a
        token multiplies (top_k routed experts of each block, the shared expert, the router, attention: docs/
        workloads.md "Mixture of experts"), as MaxText does since its PR #678."""
        return self.tokens * (6.0 * self.model.param_counts()["active_non_embedding"] + self._attention_per_token())

    def flops(self) -> float:
        """Model FLOPs each device is credited with per step: the global count / devices, so that TFLOP/s and
        MFU are per device (MFU = global FLOPs / (devices x peak x time)); the global count on one device."""
        return self.global_flops() / self.devices

    def hardware_flops(self) -> float | None:
        """With activation checkpointing every block's forward runs twice; None without it (HFU = MFU).
        Per device, like `flops`."""
        if not self.activation_checkpointing:
            return None
        recompute = 2.0 * self.model.param_counts()["active_blocks"] + self._attention_per_token() / 3
        return (self.global_flops() + self.tokens * recompute) / self.devices

    def min_flops(self) -> float:
        """The roofline floor's FLOPs (harness/machine/roofline.py): the causal attention count (the lower triangle
        a kernel must compute) whatever the convention credits (palm counts every score)."""
        return replace(self, flop_convention="causal").flops()

    def work_units(self) -> dict[str, float]:
        return {"tokens": float(self.tokens)}

    def bytes_moved(self) -> float:
        return 0.0  # a training step is compute-bound; no meaningful compulsory-traffic figure

    def memory_bytes(self) -> float:
        """The least memory one device's step holds at once (harness/engine/cost.py): fp32 weights, their gradients
        and AdamW's two moments, 16 bytes a parameter (bf16 is mixed precision over fp32 master weights; fsdp
        shards them over the devices), and the output layer's logits, per-device batch x seq_len x vocab in the
        step's dtype, that the loss reads. Activations are not counted: a step needs more than this."""
        m = self.model
        state = 16.0 * m.param_counts()["total"] / (self.devices if self.parallel == "fsdp" else 1)
        return state + float(self.per_device_batch * m.seq_len * m.vocab * (4 if self.dtype == "fp32" else 2))

    def weights(self) -> dict[str, np.ndarray]:
        return init_weights(self.model, self.seed)

    def batch_tokens(self) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets), each (global batch, seq_len) int32: a random token stream shifted by one. Device
        r of a distributed step takes rows [r·per_device_batch, (r+1)·per_device_batch)."""
        return synthetic_batch(replace(self.model, batch=self.global_batch), self.seed)

    def check_rows(self) -> dict[str, int]:
        """The correctness check's batch: the first sequence against the fp64 model; a distributed step's
        parity check runs one sequence per device (the first `devices` sequences) against the single-device
        step on the same batch."""
        return {"batch": self.devices if self.distributed else 1, "tokens": min(self.model.seq_len, CHECK_TOKENS)}


@lru_cache(maxsize=2)
def init_weights(model: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """The one set of initial weights every backend loads (float32, torch layout)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in model.weight_shapes().items():
        if len(shape) == 1:
            out[name] = np.ones(shape, np.float32)
        else:
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * INIT_STD).astype(np.float32)
    return out


@lru_cache(maxsize=2)
def synthetic_batch(model: ModelSpec, seed: int) -> tuple[np.ndarray, np.ndarray]:
    stream = np.random.default_rng(seed + 1).integers(0, model.vocab, size=(model.batch, model.seq_len + 1))
    stream = stream.astype(np.int32)
    return stream[:, :-1], stream[:, 1:]


def _strategies(s: TransformerSettings) -> list[str]:
    """`workload.parallel` in order (a strategy named twice runs once), with the single-device step first whenever a
    distributed strategy runs: it is the baseline of their scaling efficiency, timed in the same run."""
    chosen = as_list(s.parallel)
    return list(dict.fromkeys(["none", *chosen]))


def parse_specs(workload: Mapping[str, Any], dtype: str, seed: int) -> list[TrainSpec]:
    """One case per batch size in `batch` (a sweep finds the largest that fits) and strategy in `parallel`
    (the single-device step first, then each strategy under each `scaling`), for the chosen model."""
    s = parse_section("workload", TransformerSettings, workload)
    if dtype not in DTYPES:
        raise ConfigError("dtype", f"{dtype} is not a training dtype here", ", ".join(DTYPES))
    if not isinstance(s.model, Mapping):
        raise ConfigError("model", "no model chosen", "model=tiny | 125m | 350m | 1b | 3b | 8b, or a mixture of "
                          "experts: moe-tiny | moe-small | mixtral-8x7b | deepseek-v3")
    base = model_from_config(s.model)
    batches = [base.batch] if s.batch is None else as_list(s.batch)
    recipes = list(dict.fromkeys(as_list(s.fp8)))
    if dtype != "bf16" and recipes != ["none"]:
        raise ConfigError("workload.fp8", f"fp8 linear layers run on top of the bf16 step, not {dtype}",
                          "dtype=bf16 with workload.fp8=tensorwise | rowwise, or workload.fp8=none")
    common = {"flop_convention": s.flop_convention, "activation_checkpointing": s.activation_checkpointing,
              "lr": float(s.lr), "seed": seed, "warmup": s.warmup, "samples": s.samples,
              "timeout_s": float(s.timeout_s), "profile": s.profile}
    scalings = list(dict.fromkeys(as_list(s.scaling)))
    cases = []
    for b, fp8 in ((b, fp8) for b in batches for fp8 in recipes):
        model = replace(base, batch=b)
        for parallel in _strategies(s):
            if parallel == "none":
                cases.append(TrainSpec(model, dtype, fp8=fp8, **common))
            else:  # the world size is the backend's to settle (processes, or JAX devices)
                cases += [TrainSpec(model, dtype, parallel=parallel, scaling=scaling, world_size=None, fp8=fp8,
                                    **common) for scaling in scalings]
    return cases
