"""Prefill and greedy decode of the torch model with a static cache, shared by the torch backends.

Set-up (not timed): the training model built at the run's dtype on the same weights, the cache, the token buffer,
and the correctness pass: a prefill and `check_steps` decode steps, whose sequence-0 logits and tokens are
what `InferenceCase.check` compares. Then the phase's callable (see spec.py for how a call maps to a sample).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from xmfu.harness.engine.case import Prepared, Unavailable
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine import torch_device
from xmfu.harness.machine.frameworks import make_torch_device_current
from xmfu.workloads.inference.spec import InferenceSpec, decode_cycle
from xmfu.workloads.inference.torch_decoder import AttendPrefix, CachedDecoder, sdpa_prefix


def _on_gpu(device: str) -> bool:
    return device.startswith("cuda")


def _allocated(device: str) -> int:
    import torch

    return (torch_device.memory_allocated(torch, device) or 0) if torch_device.on_accelerator(device) else 0


def build_decoder(case: InferenceSpec, device: str, attend_prefix: AttendPrefix,
                  customize: Callable[[Any], dict[str, Any]] | None) -> tuple[CachedDecoder, dict[str, Any]]:
    """The training model on the meta device, given storage at the run's dtype, loaded with the case's weights
    (the fp32 master copy cast once, as a checkpoint is loaded for serving), wrapped with its cache."""
    import torch

    from xmfu.workloads.transformer.torch_model import Transformer

    dtype = torch.float32 if case.dtype == "fp32" else torch.bfloat16
    with torch.device("meta"):
        model = Transformer(case.model).to(dtype)
    model = model.to_empty(device=device)
    model.load_state_dict({n: torch.from_numpy(w) for n, w in case.weights().items()}, strict=True)
    notes = customize(model) if customize else {}
    model.eval().requires_grad_(False)
    return CachedDecoder(model, case.batch, case.cache_len, attend_prefix), notes


class Generation:
    """The token buffer (B, C + 1) and the two operations on it; `prefill()` and `step(p)` return fp32 logits."""

    def __init__(self, case: InferenceSpec, decoder: CachedDecoder, device: str, compile_phase: str | None) -> None:
        import torch

        self.case, self.decoder = case, decoder
        self.tokens = torch.zeros((case.batch, case.cache_len + 1), dtype=torch.long, device=device)
        self.tokens[:, :case.prompt_len] = torch.from_numpy(case.prompts()).to(device)
        self.positions = torch.arange(case.cache_len, device=device)
        self.compile_s: dict[str, float] = {}
        self._prefill, self._step = self._prefill_eager, self._step_eager
        if compile_phase == "prefill":
            self._compile_prefill()
        elif compile_phase == "decode":
            self._compile_step()

    def _prefill_eager(self, prompt, positions):
        logits = self.decoder(prompt, positions, 0)
        return logits, logits.argmax(-1)

    def _step_eager(self, token, positions, start):
        logits = self.decoder(token, positions, start)
        return logits, logits.argmax(-1)

    def _compile_prefill(self) -> None:
        """The prefill compiled for its one shape (Inductor's default mode: compute-bound, no graphs needed)."""
        import torch

        self._prefill = torch.compile(self._prefill_eager, dynamic=False, fullgraph=True)

    def _compile_step(self) -> None:
        """The decode step with mode="reduce-overhead" (CUDA graphs on GPUs: one replay per step), attending the
        whole static cache (start=None) so that no position recompiles."""
        import torch

        for t in self.decoder.static_buffers():
            torch._dynamo.mark_static_address(t)  # mutated in place every step: keep their addresses in graphs
        step = torch.compile(lambda token, positions: self._step_eager(token, positions, None),
                             mode="reduce-overhead", dynamic=False, fullgraph=True)

        def stepped(token, positions, start):
            torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs were copied out already
            return step(token, positions)

        self._step = stepped

    def prefill(self) -> Any:
        p = self.case.prompt_len
        logits, first = self._prefill(self.tokens[:, :p], self.positions[:p])
        self.tokens[:, p] = first
        return logits

    def step(self, pos: int) -> Any:
        logits, nxt = self._step(self.tokens[:, pos:pos + 1], self.positions[pos:pos + 1], pos)
        self.tokens[:, pos + 1] = nxt
        return logits

    def check_pass(self) -> dict[str, np.ndarray]:
        """Prefill, then `check_steps` decode steps: sequence 0's logits (float64) and the tokens each picked.
        Times the first call of each, to its end on the device (compilation, for the compiled one)."""
        import torch

        p, steps = self.case.prompt_len, self.case.check_steps

        def finished() -> float:  # a GPU runs the call after it returns: the first call's time ends when it is done
            torch_device.wait_for(torch, str(self.tokens.device), self.tokens)
            return time.perf_counter()

        start = time.perf_counter()
        logits = [self.prefill()[0]]
        self.compile_s["prefill_first_call_s"] = finished() - start
        for t in range(steps):
            start = time.perf_counter()
            # cloned: a CUDA graph replay's outputs live in the graph's memory, overwritten by the next step
            logits.append(self.step(p + t)[0].clone())
            if t == 0:
                self.compile_s["decode_first_call_s"] = finished() - start
        return {"logits": torch.stack(logits).double().cpu().numpy(),
                "tokens": self.tokens[0, p:p + steps + 1].cpu().numpy().copy()}


def _cudagraph_skips() -> int:
    """Graphs Inductor compiled with CUDA graphs asked for but not applied, in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def _cuda_graph_notes(skipped: int, device: str) -> dict[str, Any]:
    if not _on_gpu(device):
        return {"cuda_graphs": "not applied: Inductor applies CUDA graphs to CUDA devices only (this is a CPU)"}
    if skipped:
        return {"cuda_graphs": f"not applied to {skipped} graph(s): Inductor skipped them (TORCH_LOGS=cudagraphs "
                               "says why)"}
    return {"cuda_graphs": "applied (torch.compile mode=reduce-overhead: each decode step is one graph replay)"}


def _checked(gen: Generation, device: str) -> tuple[dict[str, np.ndarray], int]:
    """The correctness pass, and the most it allocated above what was resident before it (GPU; 0 on a CPU)."""
    import torch

    if not torch_device.on_accelerator(device):
        return gen.check_pass(), 0
    torch_device.reset_peak_memory_stats(torch, device)
    at_reset = _allocated(device)
    check = gen.check_pass()
    peak = torch_device.max_memory_allocated(torch, device)
    return check, peak - at_reset if peak is not None else 0


def _compile_notes(case: InferenceSpec, gen: Generation, skipped: int, device: str) -> dict[str, Any]:
    """Only the timed function is compiled (the correctness pass runs the other phase eagerly): one compilation
    per case, and the row's compile time is that function's first call."""
    out = {"compiled": "the prefill" if case.phase == "prefill" else "the decode step",
           "compile_s": gen.compile_s[f"{case.phase}_first_call_s"]}
    if case.phase == "decode":
        out.update(_cuda_graph_notes(skipped, device))
    return out


def prepare_generation(case: InferenceSpec, ctx: RunContext, *, notes: dict[str, Any],
                       attend_prefix: AttendPrefix = sdpa_prefix, compiled: bool = False,
                       customize: Callable[[Any], dict[str, Any]] | None = None, timing_valid: bool = True,
                       timing_note: str = "") -> Prepared:
    """`compiled`: torch.compile the phase's function. `customize` may swap modules of the loaded model (e.g.
    Triton linears) and returns notes about it."""
    import torch

    device = ctx.torch_device
    if case.phase == "decode" and ctx.config.timing.cuda_graph and _on_gpu(device):
        raise Unavailable("timing.cuda_graph replays one captured call, which would time one cache position over "
                          "and over; decode samples step through every position (torch_compile runs the decode "
                          "step as CUDA graphs itself)")
    make_torch_device_current(device)  # before the check: Triton and the autotuner launch on the current device
    torch.set_float32_matmul_precision("highest")  # fp32 means fp32
    before = _allocated(device)
    decoder, custom_notes = build_decoder(case, device, attend_prefix, customize)
    resident = _allocated(device) - before  # weights and cache
    skips = _cudagraph_skips()
    with torch.no_grad():
        gen = Generation(case, decoder, device, case.phase if compiled else None)
        check, transient = _checked(gen, device)
    if compiled:
        notes = {**notes, **_compile_notes(case, gen, _cudagraph_skips() - skips, device)}
    fn, advance = (gen.prefill, None) if case.phase == "prefill" else decode_cycle(case, gen.step)

    def timed() -> Any:
        with torch.no_grad():
            return fn()

    notes = {**notes, **custom_notes, **gen.compile_s, "weights_dtype": case.dtype, "kv_cache_dtype": case.dtype,
             "static_kv_cache": True,
             "peak_memory": "GPU: this backend's own weights and cache plus the largest transient of its prefill and "
                            "decode steps (other backends' buffers excluded); CPU: the process's max RSS"}
    on_device = torch_device.on_accelerator(device)
    return Prepared(timed, lambda rows: check, "torch", timing_valid=timing_valid, timing_note=timing_note,
                    notes=notes, peak_memory=lambda: resident + transient if on_device else None,
                    calls_per_sample=1, before_sample=advance)
