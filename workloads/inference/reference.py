"""The correctness reference for inference: the training model in float64 on the CPU, without any cache, and the
check of a backend's prefill and first decode steps against it.

The reference runs the training model's own blocks (causal SDPA) over the whole sequence at once: sequence 0's
prompt followed by the tokens the backend generated (it is fed the backend's own greedy choices, so every
step is compared on the same prefix even where a near-tie sent the backend another way). Its logits at positions
P-1 .. P-1+steps are what the backend's prefill and decode steps must reproduce; computing every position anew
also checks the backend's cache. The weights are the case's, rounded to its dtype first (a bf16 backend holds
bf16 weights; only its arithmetic is under test).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from xmfu.harness.engine.case import Check
from xmfu.workloads.inference.spec import InferenceSpec
from xmfu.workloads.transformer.spec import ModelSpec, init_weights

# max|logits - ref| / max|ref|. fp32: fp32 accumulation through the model (measured on the tiny preset: 2e-7 on
# torch and JAX); bf16: bf16 activations, K/V and logits between every layer (tiny: 4e-3; the bound leaves room
# for deeper models and other kernels' summation orders, and is not yet measured on the 1b/8b presets).
TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2}


@lru_cache(maxsize=4)
def reference_logits(model: ModelSpec, dtype: str, seed: int, tokens: tuple[int, ...], first: int) -> np.ndarray:
    """fp64 logits (len(tokens) - first, V) at positions first .. len(tokens)-1 of one sequence."""
    import torch

    from xmfu.workloads.transformer.torch_model import Transformer, rope_tables

    rounding = torch.bfloat16 if dtype == "bf16" else torch.float32
    with torch.device("meta"):
        net = Transformer(model).to(torch.float64)
    net = net.to_empty(device="cpu")
    net.load_state_dict({n: torch.from_numpy(w).to(rounding) for n, w in init_weights(model, seed).items()},
                        strict=True)
    cos, sin = rope_tables(replace(model, seq_len=len(tokens)), "cpu")
    with torch.no_grad():
        x = net.tok_embeddings(torch.tensor([tokens]))  # (1, T, D)
        for block in net.layers:
            x = block(x, cos, sin)  # Block.forward of the training step: causal attention over every position
        return net.output(net.norm(x[0, first:])).numpy()  # (T - first, V)


def _greedy_mismatches(got: np.ndarray, ref: np.ndarray, threshold: float) -> tuple[list[int], int]:
    """Steps where the backend's token is not the reference's argmax although the reference's top-2 margin
    exceeds `threshold` (below it, logits within tolerance may legitimately pick either); and how many steps
    were compared."""
    top2 = np.sort(ref, axis=-1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > threshold
    wrong = [int(t) for t in np.nonzero(clear & (got != ref.argmax(-1)))[0]]
    return wrong, int(clear.sum())


def check_generation(spec: InferenceSpec, result: dict[str, np.ndarray]) -> Check:
    """result: sequence 0's fp32 logits as float64, (steps + 1, V), and the tokens they picked, (steps + 1,)."""
    steps, p = spec.check_steps, spec.prompt_len
    tokens = tuple(int(t) for t in spec.prompts()[0]) + tuple(int(t) for t in result["tokens"][:steps])
    ref = reference_logits(spec.model, spec.dtype, spec.seed, tokens, p - 1)
    got = np.asarray(result["logits"], dtype=np.float64)
    scale = float(np.abs(ref).max())
    error = float(np.abs(got - ref).max()) / scale if np.isfinite(got).all() else float("inf")
    tol = TOLERANCE[spec.dtype]
    # Logits within tol·scale of the reference can swap two candidates only if their margin is under 2·tol·scale.
    wrong, compared = _greedy_mismatches(np.asarray(result["tokens"]), ref, 2 * tol * scale)
    checked = (f"sequence 0: the prefill's and {steps} decode steps' logits against the fp64 model run without a "
               f"cache over the prompt ({p} tokens) and this backend's own greedy tokens, weights rounded to "
               f"{spec.dtype}; greedy tokens compared at {compared} of {steps + 1} steps, those where the "
               f"reference's top-2 logit margin exceeds 2x the tolerance (near-ties skipped)")
    if wrong:
        return Check(False, float(len(wrong)), 0.0,
                     f"greedy tokens differing from the fp64 reference's argmax (steps {wrong})", checked)
    return Check(error <= tol, error, tol, "max|logits - ref| / max|ref|", checked)
