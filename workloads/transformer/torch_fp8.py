"""fp8 training in torch through torchao's float8 training (`torchao.float8.convert_to_float8_training`): the linear
layers fp8.py chooses become torchao Float8Linear modules, whose three GEMMs run through torch._scaled_mm on fp8
operands with dynamic scales, under the recipe `Float8LinearConfig.from_recipe_name(recipe)` (tensorwise, rowwise).

torchao is optional (`pip install 'xmfu[fp8]'`): without it an fp8 row is skipped with that hint. Checked here with
torchao 0.18.0 on torch 2.13 (CPU): both recipes run without `emulate` (torchao's option that multiplies the
fp8-rounded operands in higher precision), torch._scaled_mm taking float8_e4m3fn / float8_e5m2 operands on the CPU
too, so no emulation is asked for anywhere.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import torch_device
from xmfu.harness.machine.frameworks import make_torch_device_current
from xmfu.workloads.transformer import fp8
from xmfu.workloads.transformer.spec import TrainSpec

INSTALL_HINT = ("torchao is not installed: fp8 training in torch runs torchao's float8 training "
                "(pip install 'xmfu[fp8]')")


def unavailable(case: TrainSpec) -> str | None:
    """Why this torch cannot run the case's fp8 step (None: it can, or the case is no fp8 step)."""
    if case.fp8 == "none":
        return None
    if case.distributed:
        return fp8.distributed_problem(case.parallel)
    if importlib.util.find_spec("torchao") is None:
        return INSTALL_HINT
    return None


def convert(model: Any, recipe: str) -> dict[str, Any]:
    """Swap the model's fp8 linear layers (fp8.fp8_weight) for torchao Float8Linear under `recipe`; the notes the
    row keeps. Every layer the FLOP split counts as fp8 must have been converted, and no other."""
    import torchao
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    def chosen(module: Any, fqn: str) -> bool:
        weight = getattr(module, "weight", None)
        return weight is not None and fp8.fp8_weight(f"{fqn}.weight", tuple(weight.shape))

    config = Float8LinearConfig.from_recipe_name(recipe)
    convert_to_float8_training(model, config=config, module_filter_fn=chosen)
    converted = [n for n, m in model.named_modules() if type(m).__name__ == "Float8Linear"]
    expected = [n.removesuffix(".weight") for n, s in model.spec.weight_shapes().items() if fp8.fp8_weight(n, s)]
    if sorted(converted) != sorted(expected):
        raise RuntimeError(f"torchao converted {sorted(converted)}, the FLOP split counts {sorted(expected)}")
    return {"fp8": {"recipe": recipe, "library": f"torchao {torchao.__version__} convert_to_float8_training",
                    "config": repr(config), "linear_layers": len(converted), "gemm": "torch._scaled_mm",
                    "not_fp8": fp8.NOT_FP8}}


def _loss_curve(case: TrainSpec, ctx: RunContext, recipe: str | None) -> list[float]:
    """The bf16 step's losses (recipe None) or the fp8 step's over fp8.CHECK_STEPS AdamW steps from the initial
    weights, on the check batch; the model is released afterwards."""
    import torch

    from xmfu.workloads.transformer.torch_model import Transformer, load_weights
    from xmfu.workloads.transformer.torch_train import ADAMW, loss_under_precision

    model = Transformer(case.model)
    load_weights(model, case.weights())
    if recipe is not None:
        convert(model, recipe)
    model.to(ctx.torch_device)
    sel = case.check_rows()
    tokens, targets = (torch.from_numpy(a[: sel["batch"], : sel["tokens"]]).to(ctx.torch_device)
                       for a in case.batch_tokens())
    opt = torch.optim.AdamW(model.parameters(), lr=case.lr, **ADAMW)
    losses = []
    for _ in range(fp8.CHECK_STEPS):
        opt.zero_grad(set_to_none=True)
        loss = loss_under_precision(model, tokens, targets, "bf16")
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    del model, opt
    torch_device.empty_cache(torch, ctx.torch_device)
    return losses


def prepare_fp8(case: TrainSpec, ctx: RunContext, *, compile_model: bool, notes: dict[str, Any]) -> Prepared:
    """The fp8 step: its loss curve checked against the bf16 step's first (each model built and released in turn),
    then the step timed with torchao's fp8 linear layers."""
    from xmfu.workloads.transformer.torch_train import prepare_train

    make_torch_device_current(ctx.torch_device)
    curves = fp8.LossCurves(_loss_curve(case, ctx, case.fp8), _loss_curve(case, ctx, None))
    return prepare_train(case, ctx, compile_model=compile_model, notes=notes, check=curves.as_result(),
                         customize=lambda model: convert(model, case.fp8))
