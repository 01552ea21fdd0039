"""fp64 numpy reference for attention: the materialized softmax(QKᵀ)V and its gradients, head by head.

Backward (FlashAttention-2 paper, Algorithm 2): dV = Pᵀ dO; dP = dO Vᵀ; dS = P ∘ (dP − rowsum(dO ∘ O));
dQ = scale · dS K; dK = scale · dSᵀ Q. With GQA, dK and dV sum over the query heads of a group.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def causal_mask(seq_q: int, seq_kv: int, offset: int) -> np.ndarray:
    """(seq_q, seq_kv) booleans: query i sees key j when j <= i + offset."""
    return np.arange(seq_kv)[None, :] <= np.arange(seq_q)[:, None] + offset


def _head(case: Any, q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray) -> dict[str, np.ndarray]:
    s = case.scale * (q @ k.T)  # (Sq, Skv)
    if case.causal:
        s = np.where(causal_mask(case.seq_q, case.seq_kv, case.causal_offset), s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    out = p @ v  # (Sq, D)
    if case.mode == "fwd":
        return {"out": out}
    dp = do @ v.T
    ds = p * (dp - (do * out).sum(axis=1, keepdims=True))
    return {"out": out, "dq": case.scale * ds @ k, "dk": case.scale * ds.T @ q, "dv": p.T @ do}


def _group(case: Any, x: dict[str, np.ndarray], b: int, g: int) -> list[dict[str, np.ndarray]]:
    kv = {n: x[n][b, g].astype(np.float64) for n in ("k", "v")}
    return [_head(case, x["q"][b, h].astype(np.float64), kv["k"], kv["v"], x["do"][b, h].astype(np.float64))
            for h in range(g * case.group, (g + 1) * case.group)]


def attention(case: Any, inputs: dict[str, np.ndarray], select: dict | None) -> dict[str, np.ndarray]:
    """Reference outputs in the shapes a backend's `result(select)` returns."""
    if select is None:
        groups = [(b, g) for b in range(case.batch) for g in range(case.kv_heads)]
    else:
        groups = list(zip(*(a.tolist() for a in select["dk"]), strict=True))
    heads = {bg: _group(case, inputs, *bg) for bg in groups}
    out: dict[str, np.ndarray] = {}
    names = ["out"] if case.mode == "fwd" else ["out", "dq", "dk", "dv"]
    for name in names:
        if name in ("out", "dq"):
            per = [h[name] for bg in groups for h in heads[bg]]
            full_shape = (case.batch, case.heads)
        else:  # dK and dV: one per kv head, summed over its query heads
            per = [sum(h[name] for h in heads[bg]) for bg in groups]
            full_shape = (case.batch, case.kv_heads)
        stacked = np.stack(per)
        out[name] = stacked.reshape(*full_shape, *stacked.shape[1:]) if select is None else stacked
    return out
