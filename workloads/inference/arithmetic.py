"""FLOPs and bytes of inference on the Llama-style decoder (workloads/transformer/spec.py's ModelSpec).

Pure functions of the shape, each unit-tested against a hand computation (tests/workloads/test_inference_spec.py).
Notation: N the non-embedding parameters (blocks, final norm and output layer), L layers, H query heads, Hkv
kv heads, Dh head dim, d model width, V vocab, B batch, P prompt length, G generated steps.

- Forward FLOPs per token: 2·N (one multiply-add per weight), plus attention 4·L·H·Dh per key attended (QKᵀ and
  PV, 2 FLOPs per multiply-add each). PaLM (Chowdhery et al. 2022, appendix B) counts a training step as
  6·N + 12·L·H·Dh·S per token, the forward being one third of it (the backward costs two forwards): 2·N +
  4·L·H·Dh·S; Kaplan et al. 2020 (section 2.1) give the same 2·N forward term. "Transformer Inference
  Arithmetic" (kipply, 2022) applies 2·N per generated token and the KV-cache bytes below to decoding.
- Bytes that must move in a decode step (the MBU numerator): every weight read once at its dtype (the embedding
  table only for the rows the batch looks up), the KV cache read over the keys attended, and the step's new K and
  V written. Activations are left out (B·d values per layer against d² weights). MBU = those bytes / step time /
  peak memory bandwidth, as defined in Databricks' "LLM Inference Performance Engineering: Best Practices" (2023).
"""

from __future__ import annotations

from xmfu.workloads.transformer.spec import ModelSpec

DTYPE_BYTES = {"fp32": 4, "bf16": 2}


def kv_bytes_per_token(model: ModelSpec, dtype_bytes: int) -> int:
    """K and V of one token in every layer: 2·L·Hkv·Dh values."""
    return 2 * model.n_layers * model.n_kv_heads * model.head_dim * dtype_bytes


def kv_cache_bytes(model: ModelSpec, batch: int, cache_len: int, dtype_bytes: int) -> int:
    """The preallocated static cache: B sequences of `cache_len` = P + G slots."""
    return batch * cache_len * kv_bytes_per_token(model, dtype_bytes)


def weight_bytes(model: ModelSpec, dtype_bytes: int, rows_looked_up: int = 0) -> int:
    """Every non-embedding weight, plus the embedding rows looked up (at most the whole table)."""
    counts = model.param_counts()
    return (counts["non_embedding"] + min(rows_looked_up, model.vocab) * model.d_model) * dtype_bytes


def attention_flops_per_key(model: ModelSpec) -> float:
    """Per query token and key attended: QKᵀ and PV, 2·Dh multiply-adds per head per layer = 4·L·H·Dh FLOPs."""
    return 4.0 * model.n_layers * model.n_heads * model.head_dim


def prefill_flops(model: ModelSpec, batch: int, prompt_len: int, convention: str) -> float:
    """One forward over B prompts of P tokens, logits at the last position only (only they pick the first token).

    Every weight but the output layer works on all P tokens; the output layer (d·V) on one. Attention counts P
    keys per token under `palm` (every score, as the training step's convention) and half of that under `causal`
    (Megatron-LM's count of the lower triangle).
    """
    output = model.d_model * model.vocab
    linear = 2.0 * (model.param_counts()["non_embedding"] - output) * prompt_len + 2.0 * output
    keys = prompt_len if convention == "palm" else prompt_len / 2
    return batch * (linear + prompt_len * keys * attention_flops_per_key(model))


def mean_context(prompt_len: int, gen_len: int) -> float:
    """Keys attended by a decode step, averaged over the G steps of a generation: step t (0-based) feeds the
    token at position P + t and attends P + t + 1 keys, so the mean is P + (G + 1) / 2."""
    return prompt_len + (gen_len + 1) / 2


def decode_step_flops(model: ModelSpec, batch: int, context: float) -> float:
    """One decode step of B sequences attending `context` keys: 2·N + 4·L·H·Dh·context per sequence (exact: a
    single query sees every earlier key, so no causal convention applies). Linear in `context`, so the FLOPs at
    the mean context are the mean FLOPs of a generation's steps."""
    return batch * (2.0 * model.param_counts()["non_embedding"] + context * attention_flops_per_key(model))


def decode_step_bytes(model: ModelSpec, batch: int, context: float, dtype_bytes: int) -> float:
    """Weights once, the KV cache read over `context` keys per sequence, and one token's K and V written."""
    kv = kv_bytes_per_token(model, dtype_bytes)
    return weight_bytes(model, dtype_bytes, batch) + batch * context * kv + batch * kv


def prefill_bytes(model: ModelSpec, batch: int, prompt_len: int, dtype_bytes: int) -> float:
    """Weights once and the prompts' K and V written into the cache (a floor for the roofline, not a limit:
    prefill is compute-bound)."""
    return weight_bytes(model, dtype_bytes, batch * prompt_len) + batch * prompt_len * kv_bytes_per_token(
        model, dtype_bytes)


def mbu(step_bytes: float, step_s: float, peak_gbps: float) -> float:
    """Model bandwidth utilisation: bytes that must move per step / step time / peak bandwidth (GB/s = 1e9 B/s)."""
    return step_bytes / step_s / 1e9 / peak_gbps
