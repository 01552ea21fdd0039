"""One training step of the torch model (forward, backward, AdamW), shared by the torch backends.

Mixed precision (`bf16`): fp32 master weights and optimizer state, matmuls under torch.autocast in bf16.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import torch_device
from xmfu.harness.machine.frameworks import make_torch_device_current
from xmfu.workloads.transformer.routing import RoutingLog
from xmfu.workloads.transformer.spec import TrainSpec
from xmfu.workloads.transformer.torch_model import Attend, Transformer, grad_norm, load_weights, sdpa_attend
from xmfu.workloads.transformer.torch_profile import TRACE_NAME, chrome_trace

ADAMW = {"betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}  # the same settings as the JAX backend
# timing.cuda_graph does not capture a training step. The AdamW here has capturable=False, and torch refuses to
# capture its step() ("Attempting CUDA graph capture of step() ... capturable is False": torch 2.13
# torch/optim/optimizer.py Optimizer._accelerator_graph_capture_health_check); capturing it properly would need a
# capturable optimizer, gradients kept allocated across steps and autocast without its weight cache, a different
# step from the one every other backend times. The step is timed with events instead, and its row says so.
NO_CUDA_GRAPH = ("a training step is not captured (its torch.optim.AdamW has capturable=False, whose step() torch "
                 "refuses to capture); timed with CUDA/HIP events")


def _sync(device: str, out: Any = None) -> None:
    """Wait for the device to finish (the first step's time): by its sync rule, machine/torch_device.py."""
    import torch

    torch_device.wait_for(torch, device, out)


def loss_under_precision(model: Any, tokens: Any, targets: Any, dtype: str) -> Any:
    """The model's loss as every torch backend computes it: fp32, or bf16 autocast over fp32 master weights."""
    import torch

    # torch.autocast takes the tensor's device type (cuda, cpu, xpu, hpu or a renamed PrivateUse1 backend)
    with torch.autocast(tokens.device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
        return model(tokens, targets)


def routing_log(case: TrainSpec, model: Transformer, device: Any) -> RoutingLog | None:
    """A mixture of experts' routing log, with the expert GEMM path this device and dtype take; None when dense."""
    import torch

    from xmfu.workloads.transformer.torch_moe import expert_gemm

    if not case.model.moe:
        return None
    dtype = torch.bfloat16 if case.dtype == "bf16" else torch.float32
    path, why = expert_gemm(case.model, torch.device(device).type, dtype)
    return RoutingLog(case.model, f"{path} ({why})" if why else path, lambda t: t.detach().cpu().numpy())


def record_routing(log: RoutingLog | None, model: Transformer) -> None:
    """The last forward's imbalance per MoE block, computed on the device (no sync)."""
    counts = model.routing_counts() if log is not None else None
    if counts is not None:
        log.add(counts.max(-1).values.float() / counts.float().mean(-1))


def _compiled_graphs() -> int:
    """Graphs torch.compile (Dynamo) has captured in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def prepare_train(case: TrainSpec, ctx: RunContext, *, attend: Attend = sdpa_attend, compile_model: bool = False,
                  customize: Callable[[Transformer], dict[str, Any]] | None = None, notes: dict[str, Any],
                  timing_valid: bool = True, timing_note: str = "", check: dict[str, Any] | None = None) -> Prepared:
    """`customize` may swap modules of the loaded model (e.g. Triton linears, fp8 linears) and returns notes about
    it. `check`: the correctness values where the caller measured them (an fp8 step's loss curves, torch_fp8.py);
    else the step-0 loss and gradient norm on the initial weights."""
    import torch

    device = ctx.torch_device
    make_torch_device_current(device)
    torch.set_float32_matmul_precision("highest")  # fp32 means fp32; bf16 work runs under autocast
    model = Transformer(case.model, attend, case.activation_checkpointing)
    load_weights(model, case.weights())
    if customize:
        notes = {**notes, **customize(model)}
    model.to(device)
    # dynamic=False: the correctness pass runs a smaller shape than the timed step; without it torch.compile's
    # automatic dynamic shapes would make the timed step a dynamic-shape recompile (slower, and not what a
    # training job with a fixed batch runs).
    routing = routing_log(case, model, device)  # probes the expert GEMM before torch.compile sees the model
    runner = torch.compile(model, dynamic=False) if compile_model else model
    graphs_before = _compiled_graphs()
    tokens, targets = (torch.from_numpy(a).to(device) for a in case.batch_tokens())
    accelerated = torch_device.on_accelerator(device)

    def loss_of(x, y):
        return loss_under_precision(runner, x, y, case.dtype)

    if check is None:  # correctness values first, on the initial weights
        sel = case.check_rows()
        loss = loss_of(tokens[: sel["batch"], : sel["tokens"]], targets[: sel["batch"], : sel["tokens"]])
        loss.backward()
        check = {"loss": float(loss.detach()), "grad_norm": float(grad_norm(model))}
        model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW(model.parameters(), lr=case.lr, **ADAMW)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(tokens, targets)
        loss.backward()
        opt.step()
        record_routing(routing, model)
        return loss.detach()

    if accelerated:
        torch_device.reset_peak_memory_stats(torch, device)
    first_step_s = None
    if timing_valid:  # an untimed backend (the interpreter) is only checked: no step to warm up for
        start = time.perf_counter()
        _sync(device, step())  # the first step compiles (torch.compile) and allocates optimizer state: not timed
        first_step_s = time.perf_counter() - start

    def peak_memory() -> int | None:
        return torch_device.max_memory_allocated(torch, device) if accelerated else None

    if compile_model:  # one graph for the correctness shape, one for the timed shape; more means recompiles
        notes = {**notes, "compiles": _compiled_graphs() - graphs_before, "compile_dynamic": False}
    notes = {**notes, "first_step_s": first_step_s, "compile_s": first_step_s if compile_model else None,
             "mixed_precision": "bf16 autocast, fp32 master weights" if case.dtype == "bf16" else "fp32",
             "optimizer": f"torch.optim.AdamW {ADAMW}"}
    if routing is not None:
        notes["expert_gemm"] = routing.expert_gemm
    prepared = Prepared(step, lambda select: check, "torch", timing_valid=timing_valid, timing_note=timing_note,
                        notes=notes, peak_memory=peak_memory, no_cuda_graph=NO_CUDA_GRAPH,
                        recorded=routing.figures if routing is not None else None)
    if case.profile and timing_valid:  # after the first step: the trace shows a steady step, not set-up
        prepared.attachments[TRACE_NAME] = chrome_trace(step, device)
    return prepared
