"""What a plug-in backend uses, under one public name (docs/backends.md, "Plug-in backends"): the record `prepare`
returns, the way to refuse a case while preparing it, and the helpers that move a case's inputs into a framework
and its result back for the check. These names are kept stable; where they live inside xmfu is not.

    from xmfu.plugin import Prepared, Unavailable, to_torch, torch_rows

- `Prepared(fn, result, framework, timing_valid=True, timing_note="", notes={}, check_case=None, ...)`: what
  `prepare(case, ctx)` returns. `fn()` is the call xmfu times; `result(rows)` is called once, after the first call,
  with `case.check_rows()` (None: every output; else the rows the check compares) and returns the outputs as
  float64 host arrays (those rows only); `framework` ("torch", "jax" or "host") picks the timer; `check_case`: a
  smaller case of the same workload that the check runs on instead (an interpreter too slow for the row's size),
  `result` then answering for it and the row naming it.
- `Unavailable(reason)`: raised by `prepare`, the row is `skipped` with the reason (as `available` returning
  `(False, reason)` before it).
- `to_torch(array, dtype, device, fp8_format=None)`: a case's float32 input (rounded to `dtype` already) as a
  torch tensor of `dtype` on `device` (`ctx.torch_device`); `torch_rows(tensor, rows)`: its float64 host copy, or
  of `rows` only (selected on the device). `to_jax` and `jax_rows` do the same for JAX.
- `attention_call(case, ctx, attend, notes)`: for the attention workload, the callable for the case's mode
  (forward, backward, forward+backward) around an `attend(q, k, v) -> out` function, as the built-in torch
  backends are timed (imported on first use: it imports torch).
"""

from __future__ import annotations

from typing import Any

from xmfu.harness.engine.case import Check, Prepared, Unavailable
from xmfu.harness.machine.frameworks import jax_rows, to_jax, to_torch, torch_rows

__all__ = ["Check", "Prepared", "Unavailable", "attention_call", "jax_rows", "to_jax", "to_torch", "torch_rows"]


def attention_call(case: Any, ctx: Any, attend: Any, notes: dict[str, Any], **prepared: Any) -> Prepared:
    """The attention workload's `prepare` around `attend(q, k, v) -> out` (workloads/attention/torch_modes.py)."""
    from xmfu.workloads.attention.torch_modes import prepare_torch

    return prepare_torch(case, ctx, attend, notes, **prepared)
