"""fp8 training of the transformer step (`workload.fp8=tensorwise|rowwise`): which linear layers run in fp8, the
FLOPs each format carries, and the check of the fp8 step's loss against the bf16 step's over a few steps.

The recipes are torchao's (torchao/float8/config.py, `Float8LinearConfig.from_recipe_name`, torchao 0.18):
- tensorwise: one dynamic scale per tensor; input and weight in float8_e4m3fn, the output gradient in float8_e5m2.
- rowwise: one dynamic scale per row of each operand along the dimension a GEMM reduces over (torchao's
  "axiswise"), every operand float8_e4m3fn, scales rounded down to a power of 2.
Both run on top of the bf16 step (fp32 master weights and optimizer state); only the GEMMs of the chosen linear
layers take fp8 operands, with bf16 output. Every other GEMM stays bf16.

Which layers (`fp8_weight`): the attention projections (wq, wk, wv, wo), the dense SwiGLU (w1, w3, w2) and a
mixture of experts' shared expert, each only where both of its dimensions are multiples of 16 (torch._scaled_mm's
condition; torchao's README filters the same way). Not the output layer (torchtitan's float8 converter is run with
`filter_fqns=["output"]` in its Llama 3 recipes: the logits are the most precision-sensitive GEMM), not the router
(computed in fp32 by both backends), not the routed experts (a grouped GEMM; torchao's float8 grouped GEMM is a
prototype, torchao/prototype/moe_training, left out here).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from xmfu.harness.engine.case import Check

# What stays bf16 under either recipe (the rows' notes.fp8.not_fp8), and the strategies fp8 is not built for.
NOT_FP8 = "output layer, router, routed experts, attention scores: bf16"


def distributed_problem(parallel: str) -> str:
    return f"fp8 training runs the single-device step; parallel={parallel} with fp8 linear layers is not built"


# The names of the weights whose GEMMs run in fp8 (the torch state_dict names of spec.weight_shapes()).
_FP8_WEIGHTS = re.compile(r"layers\.\d+\.(attention\.w[qkvo]|feed_forward\.w[123]|feed_forward\.shared\.w[123])"
                          r"\.weight")
SCALED_MM_MULTIPLE = 16  # torch._scaled_mm takes matrices whose dimensions are multiples of 16


def fp8_weight(name: str, shape: tuple[int, ...]) -> bool:
    """Whether the linear layer of weight `name` (torch's (out, in) layout) runs its GEMMs in fp8."""
    return (len(shape) == 2 and _FP8_WEIGHTS.fullmatch(name) is not None
            and all(n % SCALED_MM_MULTIPLE == 0 for n in shape))


def fp8_parameters(shapes: dict[str, tuple[int, ...]]) -> int:
    """Parameters of the fp8 linear layers: every token multiplies each of them (none is a routed expert)."""
    return sum(math.prod(s) for n, s in shapes.items() if fp8_weight(n, s))


def flops_by_format(model_flops: float, tokens_per_device: float, fp8_params: int) -> dict[str, float]:
    """A step's model FLOPs split by the format the GEMMs run in: 6 FLOPs per parameter per token (forward 2,
    backward 4: Kaplan et al. 2020, the 6N of spec.global_flops) for the fp8 layers, whose three GEMMs (output,
    input gradient, weight gradient) all take fp8 operands in both recipes; the rest (attention scores, the
    output layer, the routed experts, the router) in bf16. The two sum to the row's `flops`."""
    fp8 = 6.0 * fp8_params * tokens_per_device
    return {"fp8": fp8, "bf16": model_flops - fp8}


# The loss check: both steps run CHECK_STEPS AdamW steps from the same initial weights on the check batch (the
# first sequence's first tokens); the fp8 step's loss at every step is within LOSS_TOLERANCE (relative) of the
# bf16 step's. Measured here (CPU, torch 2.13 + torchao 0.18.0, jax 0.10.2), the worst step of 4: tiny 1.5e-4
# (torch, tensorwise), 2.2e-4 (torch, rowwise), 2.6e-4 / 1.2e-4 (JAX); moe-tiny 2.7e-4 / 1.4e-4 (torch and
# torch_compile), 3.2e-4 / 1.9e-4 (JAX). 1e-2 leaves a margin of about 30 for larger models, where e4m3's 3 mantissa
# bits (a relative step of 2^-4 per operand) average over longer reductions; a step that does not train the same
# way (a gradient dropped or mis-scaled by a power of 2) misses it: tests/workloads/test_transformer_fp8.py.
CHECK_STEPS = 4
LOSS_TOLERANCE = 1e-2
METRIC = f"largest relative difference of the loss over {CHECK_STEPS} AdamW steps, fp8 step vs bf16 step"


@dataclass(frozen=True)
class LossCurves:
    """The losses of both steps over the check's steps, as a backend measured them."""

    fp8: list[float]
    bf16: list[float]

    def as_result(self) -> dict[str, list[float]]:
        return {"fp8_losses": self.fp8, "bf16_losses": self.bf16}


def check_losses(recipe: str, result: dict[str, list[float]], tokens: int) -> Check:
    """The fp8 step's losses against the bf16 step's, step by step."""
    fp8, bf16 = result["fp8_losses"], result["bf16_losses"]
    diffs = [abs(a - b) / abs(b) if b else math.inf for a, b in zip(fp8, bf16, strict=True)]
    worst = max(diffs) if diffs else math.inf
    ok = len(diffs) == CHECK_STEPS and math.isfinite(worst) and worst <= LOSS_TOLERANCE
    shown = ", ".join(f"{a:.5g}/{b:.5g}" for a, b in zip(fp8, bf16, strict=True))
    checked = (f"fp8 ({recipe}) / bf16 loss at steps 0-{len(diffs) - 1}: {shown} (same initial weights, first "
               f"sequence, {tokens} tokens)")
    return Check(ok, worst, LOSS_TOLERANCE, METRIC, checked)
