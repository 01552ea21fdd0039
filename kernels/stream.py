"""The STREAM kernels (copy, scale, add, triad) as one Triton kernel: each program moves BLOCK elements of every
array, masked at the tail. The kernel is chosen by a constexpr, so each compiles to its own loads and stores only
(a copy never reads y)."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

BLOCK = 2048  # elements per program: 8 per thread at 8 warps, 16-byte accesses for fp32 in Triton's blocked layout
NUM_WARPS = 8
KERNEL_IDS = {"copy": 0, "scale": 1, "add": 2, "triad": 3}


@triton.jit
def _stream(out_ptr, x_ptr, y_ptr, n, scalar, KERNEL: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if KERNEL == 0:
        out = x
    elif KERNEL == 1:
        out = (x.to(tl.float32) * scalar).to(x.dtype)
    elif KERNEL == 2:
        out = (x.to(tl.float32) + tl.load(y_ptr + offsets, mask=mask).to(tl.float32)).to(x.dtype)
    else:
        y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
        out = (x.to(tl.float32) + scalar * y).to(x.dtype)
    tl.store(out_ptr + offsets, out, mask=mask)


def stream(kernel: str, out: Any, x: Any, y: Any = None, scalar: float = 3.0) -> Any:
    """out = x | scalar*x | x + y | x + scalar*y, computed in fp32 and rounded once to out's dtype; returns `out`."""
    n = out.numel()
    _stream[(triton.cdiv(n, BLOCK),)](out, x, x if y is None else y, n, scalar, KERNEL=KERNEL_IDS[kernel],
                                      BLOCK_SIZE=BLOCK, num_warps=NUM_WARPS)
    return out
