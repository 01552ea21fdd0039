"""The correctness check of a distributed step: the same step-0 numbers as the single-device step on the same
global batch, before anything is timed.

A backend hands back its distributed loss and gradient norm (over all devices), the single-device step's on
the same sequences, and `update_error`: how far the parameters after one optimizer step are from the
single-device step's, as ||p_dist - p_single|| / ||p_single - p_initial|| over every parameter (the update
the step made is the scale: an absolute error would pass any step that barely moves the weights).
"""

from __future__ import annotations

import math
from typing import Any

from xmfu.harness.engine.case import Check

# Relative tolerances (loss, gradient norm, parameter update).
# fp32: loss and gradient norm 1e-5, float32 summation-order noise (2^-24 ≈ 6e-8 per rounding) with margin (the
# gradient norms are summed in float64). The update 1e-3: AdamW's first step moves each weight by lr·g/(|g|+ε),
# ε = 1e-8, so a gradient entry whose float32 noise is comparable to |g| + ε (the remainder of a cancelling
# sum) moves a visible part of its lr step; measured here (update error): torch DDP and FSDP on 2 ranks 2.8e-6
# (tiny) and 8.4e-6 (125m), JAX dp and fsdp on 4 devices 1.0e-5 (tiny) and 1.4e-4 (125m), and it grows with the
# number of such entries.
# bf16: the single-device and distributed steps round different partial sums to bf16 (2^-8 ≈ 3.9e-3 per
# rounding), and FSDP computes with bf16 parameters where the single-device step autocasts fp32 ones; AdamW's
# sign-like first step turns every gradient entry within that noise of zero into a whole-lr difference. Measured
# here: update 0.021-0.026 (DDP), 0.09-0.15 (FSDP2 MixedPrecisionPolicy), 0.037 (JAX dp).
# A step whose gradients are not synchronised (2 ranks, tiny and 125m, fp32 and bf16) misses by 0.98 (update)
# and 0.40 (gradient norm): far outside every tolerance here.
TOLERANCE = {"fp32": (1e-5, 1e-5, 1e-3), "bf16": (1e-2, 2e-2, 0.3)}
METRIC = "relative error of step-0 loss / gradient norm / parameter update vs the single-device step"


def relative(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b else abs(a - b)


def check_parity(dtype: str, result: dict[str, Any]) -> Check:
    """`result`: loss, grad_norm, ref_loss, ref_grad_norm, update_error, sequences, tokens, devices."""
    tol = TOLERANCE[dtype]
    errors = (relative(result["loss"], result["ref_loss"]), relative(result["grad_norm"], result["ref_grad_norm"]),
              float(result["update_error"]))
    finite = all(math.isfinite(float(v)) for v in (*errors, result["loss"], result["grad_norm"]))
    ok = finite and all(e <= t for e, t in zip(errors, tol, strict=True))
    worst = max(range(3), key=lambda i: errors[i] / tol[i])
    checked = (f"step-0 loss {result['loss']:.8g} vs {result['ref_loss']:.8g}, grad norm {result['grad_norm']:.8g} "
               f"vs {result['ref_grad_norm']:.8g}, parameters after one AdamW step {errors[2]:.3g} of the update "
               f"(single-device step on the same {result['sequences']} sequences x {result['tokens']} tokens, "
               f"{result['devices']} devices; errors {errors[0]:.3g} / {errors[1]:.3g} / {errors[2]:.3g})")
    return Check(ok, errors[worst], tol[worst], METRIC, checked)
