"""The correctness reference for a training step: the torch model in float64 on the CPU, on the initial
weights, and the check of a backend's step-0 loss and gradient norm against it.

Only the first sequence's first tokens are used (the model is causal, so that loss is well defined on its
own), which keeps an fp64 pass over a billion-parameter model to seconds.
"""

from __future__ import annotations

import math
from functools import lru_cache

from xmfu.harness.engine.case import Check
from xmfu.workloads.transformer.spec import TrainSpec

TOLERANCE = {"fp32": (1e-4, 1e-3), "bf16": (2e-2, 6e-2)}  # relative (loss, gradient norm) vs the fp64 model


@lru_cache(maxsize=2)
def loss_and_grad_norm(spec: TrainSpec, batch: int, tokens: int) -> dict[str, float]:
    import torch

    from xmfu.workloads.transformer.torch_model import Transformer, grad_norm, load_weights

    model = Transformer(spec.model).double()
    load_weights(model, spec.weights())
    model.double()
    inputs, targets = (torch.from_numpy(a[:batch, :tokens]) for a in spec.batch_tokens())
    loss = model(inputs, targets)
    loss.backward()
    return {"loss": float(loss.detach()), "grad_norm": float(grad_norm(model))}


def check_step(spec: TrainSpec, result: dict[str, float]) -> Check:
    """A backend's step-0 loss and gradient norm (on `spec.check_rows()`) against the fp64 model."""
    ref = loss_and_grad_norm(spec, **spec.check_rows())
    tol_loss, tol_grad = TOLERANCE[spec.dtype]
    err_loss = abs(result["loss"] - ref["loss"]) / abs(ref["loss"])
    err_grad = abs(result["grad_norm"] - ref["grad_norm"]) / abs(ref["grad_norm"])
    ok = err_loss <= tol_loss and err_grad <= tol_grad and all(map(math.isfinite, result.values()))
    worst, tol = (err_loss, tol_loss) if err_loss / tol_loss >= err_grad / tol_grad else (err_grad, tol_grad)
    checked = (f"step-0 loss {result['loss']:.6g} vs {ref['loss']:.6g}, grad norm {result['grad_norm']:.6g} "
               f"vs {ref['grad_norm']:.6g} (fp64 model, first sequence, {spec.check_rows()['tokens']} tokens)")
    return Check(ok, worst, tol, "relative error of step-0 loss / gradient norm", checked)
