"""Helion kernels for matmul and attention, after pytorch/helion's examples/matmul.py and examples/attention.py
(helion 1.5.1). Imports helion at the top: only xmfu's helion backends import this module, on first use.

The kernels are plain functions, made Helion kernels by `helion.kernel(fn, ...)` with the backend's settings (a
fixed config in Triton's interpreter, an autotune effort on a GPU): helion refuses closures in a kernel
(helion.exc.ClosuresNotSupported), so the settings cannot be captured by a factory's inner function.

Attention is examples/attention.py's forward with four changes the workload needs: the softmax scale is an argument
(the example fixes 1/sqrt(head_dim)); grouped-query attention reads each kv head once for its whole group (the
group's query rows are stacked along the sequence: a view of (B, H, S, D) as (B·KVH, G·S, D), no copy); the causal
mask takes an offset (0: top-left, seq_kv - seq_q: bottom-right), where the example's `causal_attention` is
top-left on square shapes; and `base2` picks the example's exp2 (on a GPU) or exp (in Triton's interpreter, which
runs no libdevice function: workloads/attention/helion.py).
"""

from __future__ import annotations

from typing import Any

import helion
import helion.language as hl
import torch

# log2(e): exp(x) = exp2(x·log2(e)); the example scales scores by scale·1.44269504 and uses exp2.
LOG2E = 1.44269504


def matmul(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """examples/matmul.py's `matmul`, without its epilogue, into `out` (its dtype: the workload's output)."""
    m, k = x.size()
    _, n = y.size()
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(out.dtype)
    return out


def attention(q_in: torch.Tensor, k_in: torch.Tensor, v_in: torch.Tensor, seq_q: int, offset: int,
              qk_scale: float, base2: bool) -> torch.Tensor:
    """Online-softmax attention forward; (B·KVH, G·S, D) queries against (B·KVH, S_kv, D) keys and values.
    Query row r (position r % seq_q) sees keys j <= r % seq_q + offset (offset >= seq_kv: every key). `qk_scale`
    is the softmax scale, times LOG2E when `base2`."""
    m_dim = q_in.size(1)
    head_dim = hl.specialize(q_in.size(-1))
    out = torch.empty_like(q_in)
    for tile_b, tile_m in hl.tile([q_in.size(0), m_dim]):
        m_i = hl.full([tile_b, tile_m], float("-inf"), dtype=torch.float32)
        l_i = torch.full_like(m_i, 1.0)
        acc = hl.zeros([tile_b, tile_m, head_dim], dtype=torch.float32)
        q = q_in[tile_b, tile_m, :]
        row = tile_m.index % seq_q
        for tile_n in hl.tile(k_in.size(1)):
            k = k_in[tile_b, tile_n, :]
            qk = torch.bmm(q * qk_scale, k.transpose(1, 2), torch.float32)
            # keys past the end are masked by Helion itself (its generated code fills -inf / 0 in reductions)
            qk = torch.where((row[:, None] + offset >= tile_n.index[None, :])[None, :, :], qk, float("-inf"))
            m_ij = torch.maximum(m_i, torch.amax(qk, -1))
            if base2:
                p = torch.exp2(qk - m_ij[:, :, None])
                alpha = torch.exp2(m_i - m_ij)
            else:
                p = torch.exp(qk - m_ij[:, :, None])
                alpha = torch.exp(m_i - m_ij)
            l_i = l_i * alpha + torch.sum(p, -1)
            acc = acc * alpha[:, :, None]
            v = v_in[tile_b, tile_n, :]
            acc = torch.baddbmm(acc, p.to(v.dtype), v)
            m_i = m_ij
        out[tile_b, tile_m, :] = (acc / l_i[:, :, None]).to(out.dtype)
    return out


def compile_kernel(fn: Any, settings: dict[str, Any]) -> Any:
    """`fn` as a Helion kernel; static shapes, as both examples choose ("a speedup for attention", "a performance
    boost for matmuls")."""
    return helion.kernel(fn, static_shapes=True, **settings)
