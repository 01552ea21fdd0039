"""A Llama-style dense decoder and one training step of it: parameter counts, FLOP conventions, weights.

Architecture: token embedding -> n_layers x [RMSNorm -> GQA attention with rotary embeddings -> residual,
RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> output layer (untied) -> cross-entropy. No biases.
One training step = forward, backward and an AdamW update, on a synthetic token batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from harness.engine.settings import ConfigError, boolean, check_keys, choice, positive_float, positive_int

CONVENTIONS = ("palm", "causal")
DTYPES = ("fp32", "bf16")  # bf16 = mixed precision: fp32 master weights, bf16 matmuls
CHECK_TOKENS = 128  # the correctness check runs the first sequence's first tokens (the model is causal)
CONFIG_KEYS = ("name", "model", "flop_convention", "activation_checkpointing", "lr", "batch")
MODEL_KEYS = ("name", "vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "seq_len", "batch",
              "rope_theta", "norm_eps")
INIT_STD = 0.02  # normal(0, 0.02) for every matrix, as GPT-2 and Llama reference code do; norms start at 1


@dataclass(frozen=True)
class ModelSpec:
    name: str
    vocab: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    seq_len: int
    batch: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter, named as the torch model's state_dict, in torch's (out, in) layout."""
        d, kv = self.d_model, self.n_kv_heads * self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"tok_embeddings.weight": (self.vocab, d)}
        for i in range(self.n_layers):
            p = f"layers.{i}."
            shapes.update({p + "attention_norm.weight": (d,), p + "attention.wq.weight": (d, d),
                           p + "attention.wk.weight": (kv, d), p + "attention.wv.weight": (kv, d),
                           p + "attention.wo.weight": (d, d), p + "ffn_norm.weight": (d,),
                           p + "feed_forward.w1.weight": (self.ffn_hidden, d),
                           p + "feed_forward.w3.weight": (self.ffn_hidden, d),
                           p + "feed_forward.w2.weight": (d, self.ffn_hidden)})
        shapes.update({"norm.weight": (d,), "output.weight": (self.vocab, d)})
        return shapes

    def param_counts(self) -> dict[str, int]:
        sizes = {n: math.prod(s) for n, s in self.weight_shapes().items()}
        total = sum(sizes.values())
        embedding = sizes["tok_embeddings.weight"]
        blocks = sum(v for n, v in sizes.items() if n.startswith("layers."))
        return {"total": total, "embedding": embedding, "non_embedding": total - embedding, "blocks": blocks}


def model_from_config(data: Mapping[str, Any]) -> ModelSpec:
    check_keys("model", data, MODEL_KEYS)
    ints = {k: positive_int(f"model.{k}", data.get(k)) for k in MODEL_KEYS[1:9]}
    if ints["d_model"] % ints["n_heads"] or ints["n_heads"] % ints["n_kv_heads"]:
        raise ConfigError("model", "d_model must be a multiple of n_heads, and n_heads of n_kv_heads",
                          "e.g. d_model=768 n_heads=12 n_kv_heads=4")
    if (ints["d_model"] // ints["n_heads"]) % 2:
        raise ConfigError("model.n_heads", "gives an odd head dim; rotary embeddings need an even one",
                          "d_model / n_heads even")
    return ModelSpec(name=str(data.get("name", "custom")), **ints,
                     rope_theta=positive_float("model.rope_theta", data.get("rope_theta", 10000.0)),
                     norm_eps=positive_float("model.norm_eps", data.get("norm_eps", 1e-5)))


@dataclass(frozen=True)
class TrainSpec:
    """One training step to run: the model, dtype and FLOP convention, with its formulas and its inputs.
    Pure data and formulas; `cases.TrainCase` adds the fp64 correctness check."""

    model: ModelSpec
    dtype: str
    flop_convention: str = "palm"
    activation_checkpointing: bool = False
    lr: float = 3e-4
    seed: int = 0

    workload: ClassVar[str] = "transformer"

    @property
    def tokens(self) -> int:
        return self.model.batch * self.model.seq_len

    @property
    def case_id(self) -> str:
        remat = "-remat" if self.activation_checkpointing else ""
        return f"transformer-{self.dtype}-{self.model.name}-b{self.model.batch}-s{self.model.seq_len}{remat}"

    def params(self) -> dict[str, Any]:
        return {**asdict(self.model), "params": self.model.param_counts()["total"],
                "activation_checkpointing": self.activation_checkpointing, "lr": self.lr}

    def _attention_per_token(self) -> float:
        # 12·L·H·Dh·S per token for forward+backward: QKᵀ and PV, 2 FLOPs per multiply-add, x3 for the
        # backward. `palm` counts every score (PaLM appendix B, nanoGPT, torchtitan); `causal` halves it
        # (Megatron-LM): only the lower triangle is computed.
        m = self.model
        full = 12.0 * m.n_layers * m.n_heads * m.head_dim * m.seq_len
        return full if self.flop_convention == "palm" else full / 2

    def flops(self) -> float:
        """Model FLOPs of one step: 6·N_non-embedding + attention, per token (recompute not counted)."""
        return self.tokens * (6.0 * self.model.param_counts()["non_embedding"] + self._attention_per_token())

    def hardware_flops(self) -> float | None:
        """With activation checkpointing every block's forward runs twice; None without it (HFU = MFU)."""
        if not self.activation_checkpointing:
            return None
        recompute = 2.0 * self.model.param_counts()["blocks"] + self._attention_per_token() / 3
        return self.flops() + self.tokens * recompute

    def work_units(self) -> dict[str, float]:
        return {"tokens": float(self.tokens)}

    def bytes_moved(self) -> float:
        return 0.0  # a training step is compute-bound; no meaningful compulsory-traffic figure

    def weights(self) -> dict[str, np.ndarray]:
        return init_weights(self.model, self.seed)

    def batch_tokens(self) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets), each (batch, seq_len) int32: a random token stream shifted by one."""
        return synthetic_batch(self.model, self.seed)

    def check_rows(self) -> dict[str, int]:
        return {"batch": 1, "tokens": min(self.model.seq_len, CHECK_TOKENS)}


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


def parse_specs(workload: Mapping[str, Any], dtype: str, seed: int) -> list[TrainSpec]:
    """One case per batch size in `batch` (a sweep finds the largest that fits), for the chosen model."""
    check_keys("workload", workload, CONFIG_KEYS)
    if dtype not in DTYPES:
        raise ConfigError("dtype", f"{dtype} is not a training dtype here", ", ".join(DTYPES))
    raw = workload.get("model")
    if not isinstance(raw, Mapping):
        raise ConfigError("model", "no model chosen", "model=tiny | 125m | 350m | 1b | 3b | 8b")
    base = model_from_config(raw)
    batches = workload.get("batch")
    batches = [base.batch] if batches is None else (batches if isinstance(batches, list) else [batches])
    convention = choice("workload.flop_convention", workload.get("flop_convention", "palm"), CONVENTIONS)
    remat = boolean("workload.activation_checkpointing", workload.get("activation_checkpointing", False))
    lr = positive_float("workload.lr", workload.get("lr", 3e-4))
    cases = []
    for i, b in enumerate(batches):
        model = ModelSpec(**{**asdict(base), "batch": positive_int(f"workload.batch[{i}]", b)})
        cases.append(TrainSpec(model, dtype, convention, remat, lr, seed))
    return cases
