"""A Llama-style dense decoder and one training step of it: parameter counts, FLOP conventions, weights.

Architecture: token embedding -> n_layers x [RMSNorm -> GQA attention with rotary embeddings -> residual,
RMSNorm -> SwiGLU MLP -> residual] -> RMSNorm -> output layer (untied) -> cross-entropy. No biases.
One training step = forward, backward and an AdamW update, on a synthetic token batch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from xmfu.harness.engine.settings import ConfigError, boolean, check_keys, choice, positive_float, positive_int

CONVENTIONS = ("palm", "causal")
DTYPES = ("fp32", "bf16")  # bf16 = mixed precision: fp32 master weights, bf16 matmuls
CHECK_TOKENS = 128  # the correctness check runs the first sequence's first tokens (the model is causal)
CONFIG_KEYS = ("name", "model", "flop_convention", "activation_checkpointing", "lr", "batch", "parallel", "scaling",
               "warmup", "samples", "timeout_s", "profile")
PARALLEL = ("none", "ddp", "fsdp", "dp")  # none: the single-device step, every strategy's baseline
SCALINGS = ("weak", "strong")  # weak: `batch` per device (global = batch x devices); strong: `batch` is global
MODEL_KEYS = ("name", "vocab", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "seq_len", "batch",
              "rope_theta", "norm_eps")
ADAMW = {"b1": 0.9, "b2": 0.95, "eps": 1e-8, "weight_decay": 0.1}  # every backend's AdamW (optax's names)
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

    model: ModelSpec  # model.batch: per device under weak scaling, global under strong (single device: both)
    dtype: str
    flop_convention: str = "palm"
    activation_checkpointing: bool = False
    lr: float = 3e-4
    seed: int = 0
    parallel: str = "none"
    scaling: str = "weak"
    world_size: int | None = 1  # devices the step spans; None until a distributed backend settles it
    warmup: int = 3  # distributed steps: untimed steps, then `samples` samples, the same on every rank
    samples: int = 10
    timeout_s: float = 300.0  # a collective (or a rank joining) slower than this ends the run
    profile: bool = False  # torch: a profiler trace of one step, kept in the bundle

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
        return (f"transformer-{self.dtype}-{self.model.name}-b{self.model.batch}-s{self.model.seq_len}{remat}"
                f"{strategy}")

    def params(self) -> dict[str, Any]:
        """The single-device step keeps its earlier params (and comparability key); a distributed one adds
        its strategy, scaling and world size, so `compare` refuses rows that differ in any of them."""
        out = {**asdict(self.model), "params": self.model.param_counts()["total"],
               "activation_checkpointing": self.activation_checkpointing, "lr": self.lr}
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
        """Model FLOPs of one step over all devices: 6·N_non-embedding + attention, per token (recompute not
        counted)."""
        return self.tokens * (6.0 * self.model.param_counts()["non_embedding"] + self._attention_per_token())

    def flops(self) -> float:
        """Model FLOPs each device is credited with per step: the global count / devices, so that TFLOP/s and
        MFU are per device (MFU = global FLOPs / (devices x peak x time)); the global count on one device."""
        return self.global_flops() / self.devices

    def hardware_flops(self) -> float | None:
        """With activation checkpointing every block's forward runs twice; None without it (HFU = MFU).
        Per device, like `flops`."""
        if not self.activation_checkpointing:
            return None
        recompute = 2.0 * self.model.param_counts()["blocks"] + self._attention_per_token() / 3
        return (self.global_flops() + self.tokens * recompute) / self.devices

    def work_units(self) -> dict[str, float]:
        return {"tokens": float(self.tokens)}

    def bytes_moved(self) -> float:
        return 0.0  # a training step is compute-bound; no meaningful compulsory-traffic figure

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


def _listed(field: str, value: Any, allowed: tuple[str, ...], default: str) -> list[str]:
    values = [default] if value is None else (list(value) if isinstance(value, (list, tuple)) else [value])
    chosen = [choice(f"{field}[{i}]" if len(values) > 1 else field, v, allowed) for i, v in enumerate(values)]
    return list(dict.fromkeys(chosen))  # a strategy named twice runs once


def _strategies(workload: Mapping[str, Any]) -> list[str]:
    """`workload.parallel` in order, with the single-device step first whenever a distributed strategy runs:
    it is the baseline of their scaling efficiency, timed in the same run."""
    chosen = _listed("workload.parallel", workload.get("parallel"), PARALLEL, "none")
    return ["none", *(p for p in chosen if p != "none")]


def _distributed_settings(workload: Mapping[str, Any]) -> dict[str, Any]:
    return {"warmup": positive_int("workload.warmup", workload.get("warmup", 3)),
            "samples": positive_int("workload.samples", workload.get("samples", 10)),
            "timeout_s": positive_float("workload.timeout_s", workload.get("timeout_s", 300)),
            "profile": boolean("workload.profile", workload.get("profile", False))}


def parse_specs(workload: Mapping[str, Any], dtype: str, seed: int) -> list[TrainSpec]:
    """One case per batch size in `batch` (a sweep finds the largest that fits) and strategy in `parallel`
    (the single-device step first, then each strategy under each `scaling`), for the chosen model."""
    check_keys("workload", workload, CONFIG_KEYS)
    if dtype not in DTYPES:
        raise ConfigError("dtype", f"{dtype} is not a training dtype here", ", ".join(DTYPES))
    raw = workload.get("model")
    if not isinstance(raw, Mapping):
        raise ConfigError("model", "no model chosen", "model=tiny | 125m | 350m | 1b | 3b | 8b")
    base = model_from_config(raw)
    batches = workload.get("batch")
    batches = [base.batch] if batches is None else (batches if isinstance(batches, list) else [batches])
    common = {"flop_convention": choice("workload.flop_convention", workload.get("flop_convention", "palm"),
                                        CONVENTIONS),
              "activation_checkpointing": boolean("workload.activation_checkpointing",
                                                  workload.get("activation_checkpointing", False)),
              "lr": positive_float("workload.lr", workload.get("lr", 3e-4)), "seed": seed,
              **_distributed_settings(workload)}
    scalings = _listed("workload.scaling", workload.get("scaling"), SCALINGS, "weak")
    cases = []
    for i, b in enumerate(batches):
        model = ModelSpec(**{**asdict(base), "batch": positive_int(f"workload.batch[{i}]", b)})
        for parallel in _strategies(workload):
            if parallel == "none":
                cases.append(TrainSpec(model, dtype, **common))
            else:  # the world size is the backend's to settle (processes, or JAX devices)
                cases += [TrainSpec(model, dtype, parallel=parallel, scaling=scaling, world_size=None, **common)
                          for scaling in scalings]
    return cases
