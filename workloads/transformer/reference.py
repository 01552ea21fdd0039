"""The correctness reference for a training step: the torch model in float64 on the CPU, initial weights.

Only the first sequence's first tokens are used (the model is causal, so that loss is well defined on its
own), which keeps an fp64 pass over a billion-parameter model to seconds.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch


@lru_cache(maxsize=2)
def loss_and_grad_norm(case: Any, batch: int, tokens: int) -> dict[str, float]:
    from workloads.transformer.torch_model import Transformer, grad_norm, load_weights

    model = Transformer(case.model).double()
    load_weights(model, case.weights())
    model.double()
    inputs, targets = (torch.from_numpy(a[:batch, :tokens]) for a in case.batch_tokens())
    loss = model(inputs, targets)
    loss.backward()
    return {"loss": float(loss), "grad_norm": float(grad_norm(model))}
