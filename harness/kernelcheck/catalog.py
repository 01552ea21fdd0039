"""Every Triton kernel of xmfu, as its own launch code launches it: each entry runs the kernels' public functions
(kernels/*.py) on meta tensors (shapes and dtypes, no memory) in the worker, where every `kernel[grid](...)` is
captured instead of launched, so the arguments, constexprs and specialisations are those a real launch forms, and a
change to a kernel's signature or launch needs no change here.

Shapes are the workloads' defaults: GEMMs 4096^3, row-major; attention B 4, H 32, S 4096, head dim 128, causal
(the masked and unmasked key loops both compiled), forward and backward through autograd; decode one token against
a 4096-slot cache, 32 query heads on 8 kv heads, the split count FlashAttention-2's heuristic gives for the part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xmfu.harness.kernelcheck.targets import Target, chosen

GEMM = 4096
ATTENTION = {"batch": 4, "heads": 32, "kv_heads": 32, "seq": 4096, "head_dim": 128, "causal": True}
DECODE = {"batch": 8, "heads": 32, "kv_heads": 8, "capacity": 4096, "head_dim": 128}
STREAM_ELEMENTS = 2**26
MMA_DTYPES = ("bf16", "fp16", "fp8")  # the dtypes whose dots must run on the target's matrix instructions
# fp32 at ieee precision multiplies on the FMA units with the same tiles as the tensor-core dtypes: on sm90 those
# tiles spill kilobytes per thread (5836 bytes for matmul's 128x256x64 with 8 warps, 6208 for the attention
# forward's 128x64, 36480 for its backward's 32x64), and each compile takes 10-30 s of CPU, several times a 16-bit
# one. `xmfu kernels --dtypes fp32` compiles them; the default sweep leaves them out.
NOT_BY_DEFAULT = ("fp32",)


@dataclass(frozen=True)
class Entry:
    name: str  # what `--kernels` takes
    source: str  # the module under kernels/
    shapes: str  # what it is compiled for, in words
    dtypes: Callable[[Target], tuple[str, ...]]  # the dtypes xmfu's backends offer on the target
    launch: Callable[[str, Target], None]  # the launch code, on meta tensors (run in the worker only)
    targets: Callable[[Target], bool] = lambda t: True
    dots: bool = True  # whether its kernels multiply matrices (fp32 is then left out unless asked for)

    def swept(self, target: Target, asked: set[str] | None) -> list[str]:
        """The dtypes compiled for `target`: those asked for (--dtypes) that it offers; by default every one it offers
        but fp32 where it multiplies matrices (NOT_BY_DEFAULT)."""
        offered = self.dtypes(target)
        if asked is not None:
            return [d for d in offered if d in asked]
        return [d for d in offered if not (self.dots and d in NOT_BY_DEFAULT)]


def gemm_dtypes(target: Target) -> tuple[str, ...]:
    """fp32 (ieee), tf32, bf16, fp16 and fp8 where xmfu's Triton GEMM backends offer them (workloads/matmul/triton.py:
    tf32 on NVIDIA sm80+ and AMD's TF32_AMD_ARCHES; fp8 from sm89 and on AMD's FP8_AMD_ARCHES)."""
    from xmfu.workloads.matmul.triton import FP8_AMD_ARCHES, TF32_AMD_ARCHES

    tf32 = target.capability >= 80 if target.nvidia else target.name in TF32_AMD_ARCHES
    fp8 = target.capability >= 89 if target.nvidia else target.name in FP8_AMD_ARCHES
    return ("fp32", *(("tf32",) if tf32 else ()), "bf16", "fp16", *(("fp8",) if fp8 else ()))


def attention_dtypes(target: Target) -> tuple[str, ...]:
    return ("fp32", "bf16", "fp16")  # workloads/attention/triton.py: no tf32; fp32 at ieee precision


def _torch_dtype(dtype: str, target: Target) -> Any:
    from xmfu.harness.machine.dtypes import fp8_format
    from xmfu.harness.machine.frameworks import torch_dtype

    return torch_dtype(dtype, fp8_format("cuda" if target.nvidia else "rocm", target.name) if dtype == "fp8" else None)


def _meta(shape: tuple[int, ...], dtype: Any, grad: bool = False) -> Any:
    import torch

    return torch.empty(shape, dtype=dtype, device="meta", requires_grad=grad)


def _gemm_operands(dtype: str, target: Target) -> tuple[Any, Any, Any, str | None]:
    from xmfu.workloads.matmul.triton import INPUT_PRECISION, OUTPUT_DTYPE

    a, b = (_meta((GEMM, GEMM), _torch_dtype(dtype, target)) for _ in range(2))
    out = _meta((GEMM, GEMM), _torch_dtype(OUTPUT_DTYPE.get(dtype, dtype), target))
    return a, b, out, INPUT_PRECISION.get(dtype)


def _matmul(dtype: str, target: Target) -> None:
    from xmfu.kernels import matmul as kernel

    a, b, out, precision = _gemm_operands(dtype, target)
    kernel.matmul(a, b, out, precision)


def _persistent(use_tma: bool) -> Callable[[str, Target], None]:
    def launch(dtype: str, target: Target) -> None:
        from xmfu.kernels import matmul_persistent as gemm

        a, b, out, precision = _gemm_operands(dtype, target)
        chosen = gemm.plan(a, b, out, num_sms=target.processors, num_xcds=target.xcds, use_tma=use_tma)
        gemm.matmul(a, b, out, precision, chosen)
    return launch


def _attention(module: str) -> Callable[[str, Target], None]:
    def launch(dtype: str, target: Target) -> None:
        import importlib

        import torch

        kernel = importlib.import_module(module)
        s = ATTENTION
        torch_type = _torch_dtype(dtype, target)
        q = _meta((s["batch"], s["heads"], s["seq"], s["head_dim"]), torch_type, grad=True)
        k, v = (_meta((s["batch"], s["kv_heads"], s["seq"], s["head_dim"]), torch_type, grad=True) for _ in range(2))
        out = kernel.flash_attention(q, k, v, causal=s["causal"])
        out.backward(torch.empty_like(out))
    return launch


def _decode(dtype: str, target: Target) -> None:
    import triton

    from xmfu.kernels import flash_decoding as kernel

    s = DECODE
    torch_type = _torch_dtype(dtype, target)
    q = _meta((s["batch"], s["heads"], 1, s["head_dim"]), torch_type)
    k, v = (_meta((s["batch"], s["kv_heads"], s["capacity"], s["head_dim"]), torch_type) for _ in range(2))
    # the splits a launch on the part picks (_splits_for: two 128-thread blocks per SM, 64-key blocks)
    splits = kernel.num_splits(s["batch"] * s["kv_heads"], 2 * target.processors, triton.cdiv(s["capacity"], 64))
    kernel.flash_decode(q, k, v, s["capacity"], splits=splits)


def _stream(dtype: str, target: Target) -> None:
    from xmfu.kernels import stream as kernel

    x, y, out = (_meta((STREAM_ELEMENTS,), _torch_dtype(dtype, target)) for _ in range(3))
    for name in ("triad", "add", "scale", "copy"):  # triad first: the one a quick sweep compiles
        kernel.stream(name, out, x, None if name in ("copy", "scale") else y)


def _pallas_placeholder(dtype: str, target: Target) -> None:
    raise NotImplementedError("the worker lowers the Pallas GEMM through jax (worker.pallas_launches)")


def _hopper_or_later(target: Target) -> bool:
    return target.nvidia and target.capability >= 90


ENTRIES = {e.name: e for e in (
    Entry("matmul", "kernels/matmul.py", f"{GEMM}^3, row-major A and B (fp8: bf16 out)", gemm_dtypes, _matmul),
    Entry("persistent", "kernels/matmul_persistent.py", f"{GEMM}^3, row-major; the plain-pointer kernel, one "
          "program per SM/CU (the XCD remap on AMD)", gemm_dtypes, _persistent(use_tma=False)),
    Entry("persistent_tma", "kernels/matmul_persistent.py", f"{GEMM}^3, row-major; tensor descriptors (TMA), "
          "NVIDIA sm90 and later only", gemm_dtypes, _persistent(use_tma=True), targets=_hopper_or_later),
    Entry("attention", "kernels/flash_attention.py", "B 4, H 32, S 4096, head dim 128, causal; forward and backward "
          "(dK/dV and dQ kernels)", attention_dtypes, _attention("xmfu.kernels.flash_attention")),
    Entry("attention_fa2", "kernels/flash_attention_fa2.py", "as attention; forward, delta and the fused backward",
          attention_dtypes, _attention("xmfu.kernels.flash_attention_fa2")),
    Entry("decode", "kernels/flash_decoding.py", "one token, 32 query heads on 8 kv heads, 4096-slot cache, head "
          "dim 128; split-KV and combine", attention_dtypes, _decode),
    Entry("stream", "kernels/stream.py", f"{STREAM_ELEMENTS} elements; triad, add, scale, copy",
          attention_dtypes, _stream, dots=False),
    Entry("pallas_matmul", "kernels/pallas_matmul.py", f"{GEMM}^3 through Pallas' Triton lowering (jax), blocks and "
          "launch as workloads/matmul/jax_pallas.py; compiled by the installed Triton, not XLA's",
          attention_dtypes, _pallas_placeholder),
)}


@dataclass
class Job:
    """One compile: a kernel's launch with one config, dtype and target (worker.py makes and runs them)."""

    entry: str
    kernel: str  # the launch's label: the jit function's name, with what tells repeated launches apart
    config: str
    config_index: int
    dtype: str
    target: str
    compile: Any = field(default=None, repr=False)  # () -> the CompiledKernel
    params: dict = field(default_factory=dict)  # the config's values by name (BLOCK_M, warps, stages...)
    skipped: str = ""  # why it cannot be compiled here at all (the Pallas GEMM without jax), else ""


def label(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "launch defaults"


class EntryError(ValueError):
    """A kernel name xmfu does not know."""


def parse_entries(text: str | None) -> tuple[Entry, ...]:
    if not text:
        return tuple(ENTRIES.values())
    return chosen(text, ENTRIES, "kernel", EntryError)
