"""The mixture-of-experts MLP of the torch model: top-k routing, the routed experts as one grouped GEMM, a shared
expert, and the load-balancing term. Shapes: T tokens (B·S), D d_model, E experts, k top_k, F expert width.

Routing (Mixtral, Jiang et al. 2024; Switch Transformer, Fedus et al. 2021): router logits in fp32, softmax over
the E experts, the k largest probabilities renormalised to sum to 1 weight the chosen experts' outputs.
Load-balancing term (Switch Transformer eq. 4, with k choices per token): aux = E · Σ_e f_e · P_e, f_e the share
of the T·k assignments that went to expert e, P_e the mean router probability of e; 1 when perfectly balanced.

The experts run as one grouped GEMM over the tokens sorted by expert: `torch._grouped_mm` where this torch has it
for the dtype and device (probed once), else one matmul per expert; the row's notes say which (`expert_gemm`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from xmfu.workloads.transformer.spec import ModelSpec

LOOP = "loop: one torch.matmul per expert"
GROUPED = "torch._grouped_mm (one grouped GEMM for all experts)"


def _probe(device_type: str, dtype: torch.dtype) -> bool:
    """A small torch._grouped_mm (with an empty group, and groups of rows not a multiple of 16) agrees with
    per-group matmuls, forward and backward: the training step needs both (the weight gradient is a grouped GEMM
    whose reduction runs over the ragged dimension)."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(24, 16, generator=gen).to(device_type, dtype).requires_grad_()
    b = torch.randn(3, 16, 8, generator=gen).to(device_type, dtype).requires_grad_()
    offs = torch.tensor([8, 8, 24], dtype=torch.int32, device=device_type)
    grad = torch.randn(24, 8, generator=gen).to(device_type, dtype)
    out = torch._grouped_mm(a, b, offs=offs)
    out.backward(grad)
    a32, b32 = a.detach().float(), b.detach().float()
    ref = torch.cat([a32[:8] @ b32[0], a32[8:] @ b32[2]])
    ref_b1 = a32[8:].t() @ grad[8:].float()  # the weight gradient of the last group

    def close(x: torch.Tensor, y: torch.Tensor) -> bool:
        return bool(torch.allclose(x.float(), y, rtol=2e-2, atol=5e-2 * float(y.abs().max())))

    return close(out.detach(), ref) and close(b.grad[2], ref_b1) and not b.grad[1].any()


# (device type, dtype) -> why torch._grouped_mm cannot run there, or None. A plain dict the forward reads, so that
# under torch.compile it is a guarded lookup (the backends probe before compiling: `expert_gemm`).
PROBED: dict[tuple[str, torch.dtype], str | None] = {}


def grouped_mm_problem(device_type: str, dtype: torch.dtype) -> str | None:
    """Why torch._grouped_mm cannot run the experts here (None: it can): absent from this torch, or refused for the
    dtype on this device, found by running a small one and checking it against per-group matmuls (once)."""
    if (device_type, dtype) in PROBED:
        return PROBED[device_type, dtype]
    why = None
    if not hasattr(torch, "_grouped_mm"):
        why = f"torch {torch.__version__} has no torch._grouped_mm"
    else:
        try:
            with torch.autocast(device_type, enabled=False):  # the model's forward may ask first, under autocast
                why = None if _probe(device_type, dtype) else f"torch._grouped_mm gave wrong results for {dtype}"
        except (RuntimeError, NotImplementedError) as exc:
            why = f"torch._grouped_mm refused {dtype} on {device_type}: {str(exc).splitlines()[0]}"
    PROBED[device_type, dtype] = why
    return why


def compile_problem(dtype: torch.dtype) -> str | None:
    """Why torch.compile cannot trace torch._grouped_mm in `dtype` (None: it can): Dynamo runs each op on fake
    tensors first, and the fake kernel may take fewer dtypes than the CPU one (torch 2.13: bf16 only, "Expected
    inputs of BF16 type"). Checked the way Dynamo does it, on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    if not hasattr(torch, "_grouped_mm"):  # torch 2.6 (the floor and the ROCm image) has none
        return f"torch {torch.__version__} has no torch._grouped_mm for torch.compile to trace"
    try:
        with FakeTensorMode():
            a, b = torch.empty(8, 16, dtype=dtype), torch.empty(2, 16, 8, dtype=dtype)
            torch._grouped_mm(a, b, offs=torch.tensor([4, 8], dtype=torch.int32))
    except (RuntimeError, NotImplementedError) as exc:
        return f"torch.compile cannot trace torch._grouped_mm in {dtype}: {str(exc).splitlines()[0]}"
    return None


def expert_gemm(spec: ModelSpec, device_type: str, dtype: torch.dtype) -> tuple[str, str]:
    """(path, why): the grouped GEMM the experts run as, and why the loop where it is the loop."""
    why = grouped_mm_problem(device_type, dtype)
    if why is None and (spec.d_model % 8 or spec.expert_width % 8):
        why = "torch._grouped_mm needs rows of a multiple of 16 bytes: d_model and expert width multiples of 8"
    return (LOOP, why) if why else (GROUPED, "")


def grouped_matmul(x: torch.Tensor, w: torch.Tensor, counts: list[int] | None, offsets: torch.Tensor) -> torch.Tensor:
    """x (N, in) sorted by expert, w (E, out, in) -> (N, out): rows offsets[e-1]:offsets[e] times w[e]ᵀ. `counts`
    None: one torch._grouped_mm; else the loop over experts (every expert multiplied, an empty one by 0 rows, so
    each has a gradient)."""
    if counts is None:
        return torch._grouped_mm(x, w.transpose(1, 2), offs=offsets)
    return torch.cat([rows @ w[e].t() for e, rows in enumerate(x.split(counts))])


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)  # gate
        self.w3 = nn.Linear(d_model, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, d_model, bias=False)  # down

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # SwiGLU (Shazeer 2020)


class Experts(nn.Module):
    """E SwiGLU experts, stacked: w1, w3 (E, F, D), w2 (E, D, F), each expert in torch's (out, in) layout."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        e, f, d = spec.n_experts, spec.expert_width, spec.d_model
        self.w1, self.w3 = nn.Parameter(torch.empty(e, f, d)), nn.Parameter(torch.empty(e, f, d))
        self.w2 = nn.Parameter(torch.empty(e, d, f))


class MoE(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        self.router = nn.Linear(spec.d_model, spec.n_experts, bias=False)
        self.experts = Experts(spec)
        self.shared = SwiGLU(spec.d_model, spec.n_shared_experts * spec.expert_width) if spec.n_shared_experts else None
        self.counts: torch.Tensor | None = None  # (E,) tokens each expert got in the last forward
        self.aux: torch.Tensor | None = None  # the last forward's load-balancing term

    def route(self, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(weights (T, k), experts (T, k), probs (T, E)), in fp32 (fp64 for the fp64 model) whatever the autocast."""
        rdt = torch.float64 if flat.dtype == torch.float64 else torch.float32
        with torch.autocast(flat.device.type, enabled=False):
            probs = F.linear(flat.to(rdt), self.router.weight.to(rdt)).softmax(-1)  # (T, E)
        weights, experts = probs.topk(self.spec.top_k, dim=-1)  # (T, k)
        return weights / weights.sum(-1, keepdim=True), experts, probs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        e, k = self.spec.n_experts, self.spec.top_k
        flat = x.reshape(b * s, d)  # (T, D)
        weights, experts, probs = self.route(flat)
        assignments = experts.flatten()  # (T·k,)
        counts = torch.zeros(e, dtype=torch.long, device=x.device).scatter_add_(
            0, assignments, torch.ones_like(assignments))  # (E,); bincount's output shape depends on the data
        self.counts = counts.detach()
        self.aux = e * torch.sum(counts.to(probs.dtype) / (b * s * k) * probs.mean(0))
        order = assignments.argsort(stable=True)  # the T·k assignments, grouped by expert
        token = order // k  # (T·k,) the token of each sorted assignment
        dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else x.dtype
        path, _ = expert_gemm(self.spec, x.device.type, dtype)
        loop = None if path == GROUPED else counts.tolist()
        offsets = counts.cumsum(0).to(torch.int32)
        xs = flat[token].to(dtype)  # (T·k, D)
        w = self.experts
        h = F.silu(grouped_matmul(xs, w.w1.to(dtype), loop, offsets)) * grouped_matmul(xs, w.w3.to(dtype), loop,
                                                                                       offsets)  # (T·k, F)
        out = grouped_matmul(h, w.w2.to(dtype), loop, offsets)  # (T·k, D)
        combined = torch.zeros(b * s, d, dtype=weights.dtype, device=x.device)
        combined = combined.index_add(0, token, out.to(weights.dtype) * weights.flatten()[order, None])
        if self.shared is not None:
            combined = combined + self.shared(flat).to(weights.dtype)
        return combined.to(x.dtype).reshape(b, s, d)
