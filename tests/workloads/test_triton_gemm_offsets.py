"""xmfu's Triton GEMM where an operand's element offset passes 2**31 (issue 25, item 3): int32 offsets wrap there
(an illegal address, or silent corruption), so the kernel switches to int64 offsets.

The boundary is crossed without allocating 8 GB: the operand is a strided view of a 4 GiB fp16 buffer from
torch.empty, whose pages stay untouched (never resident) except the few rows the view covers. The interpreter reads
memory at the addresses the kernel forms (triton/runtime/interpreter.py, create_addptr and load), so a wrapped offset
faults there as it would on a GPU: each case runs in a child process, where a crash is a failed test, not a dead
pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.workloads.triton_front_end import compile_errors
from xmfu.harness.machine import compat

if compat.triton_interpreter_too_old():
    pytest.skip(compat.triton_interpreter_too_old(), allow_module_level=True)

from xmfu.kernels import matmul as gemm

ROOT = Path(__file__).resolve().parents[2]
CHILD = r"""
import importlib, json, os, sys
import torch
gemm = importlib.import_module(sys.argv[2])
M, N, K, S = 3, 24, 40, 2**30 + 64  # row stride S: the view's row 2 starts at element 2**31 + 128
base = torch.empty(2 * S + 4096, dtype=torch.float16)  # 4 GiB of address space, untouched
g = torch.Generator().manual_seed(0)
def filled(t):
    t.copy_((torch.rand(t.shape, generator=g) * 2 - 1).half())
    return t
small = lambda *shape: filled(torch.empty(*shape, dtype=torch.float16))
for which in sys.argv[1].split(","):
    if which == "a":    # A's rows S apart
        a, b, out = filled(base.as_strided((M, K), (S, 1))), small(K, N), torch.empty(M, N, dtype=torch.float16)
    elif which == "b":  # B's columns S apart
        a, b, out = small(M, K), filled(base.as_strided((K, 3), (1, S))), torch.empty(M, 3, dtype=torch.float16)
    else:               # C's rows S apart
        a, b, out = small(M, K), small(K, N), base.as_strided((M, N), (S, 1))
    gemm.matmul(a, b, out)
    ref = (a.double() @ b.double())
    print(json.dumps({"operand": which, "int64": gemm.needs_int64_offsets(a, b, out),
                      "error": float((out.double() - ref).abs().max() / ref.abs().max())}))
"""


# The persistent kernel's three operands in one process (each process spends most of its 10 s starting): its
# pointer variant, as its descriptor variant forms no element offsets (the copy engine addresses each tile).
@pytest.mark.parametrize(("operands", "kernel"), [("a", "xmfu.kernels.matmul"), ("b", "xmfu.kernels.matmul"),
                                                  ("c", "xmfu.kernels.matmul"),
                                                  ("a,b,c", "xmfu.kernels.matmul_persistent")])
def test_an_operand_past_2_31_elements_is_read_and_written_in_place(operands, kernel):
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD, operands, kernel], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, f"exit {done.returncode} (-11: the wrapped offset faulted)\n{done.stderr[-2000:]}"
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["operand"] for r in results] == operands.split(",")
    for result in results:
        assert result["int64"] and result["error"] < 2e-3, result  # fp16 output rounding: 2**-11


def _meta(rows: int, cols: int) -> torch.Tensor:
    return torch.empty(rows, cols, dtype=torch.bfloat16, device="meta")


def test_the_output_layer_of_the_llama_presets_switches_at_batch_9():
    """The torch_triton transformer's output layer at seq 2048 and a 128,256-word vocabulary (1b/3b/8b presets):
    logits = x @ Wᵀ, dx = dlogits @ W, dW = dlogitsᵀ @ x. 9 x 2048 x 128256 > 2**31 > 8 x 2048 x 128256."""
    vocab, dim = 128_256, 2048
    for batch, wide in ((8, False), (9, True)):
        tokens = batch * 2048
        x, w, logits = _meta(tokens, dim), _meta(vocab, dim), _meta(tokens, vocab)
        assert gemm.needs_int64_offsets(x, w.t(), logits) is wide  # forward: logits written
        assert gemm.needs_int64_offsets(logits, w, x) is wide  # dx: dlogits read along rows
        assert gemm.needs_int64_offsets(logits.t(), x, w) is wide  # dW: dlogits read along K


def test_tile_max_covers_every_config():
    configs = gemm.nvidia_configs() + gemm.amd_configs() + gemm.interpreter_configs()
    edges = [c.kwargs[k] for c in configs for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")]
    assert max(edges) <= gemm.TILE_MAX


def test_the_int64_variant_compiles_for_nvidia_and_amd():
    """Triton 3.9's front end (TTIR) for sm90 and gfx942, with a unit K stride (Triton specialises an int argument
    equal to 1 into a constant, triton/runtime/jit.py) and without."""
    ints = ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn")
    cases = []
    for device in ("sm90", "gfx942"):
        for unit in ((), ("stride_ak", "stride_bn", "stride_cn")):
            signature = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16",
                         **{n: "i32" for n in ints if n not in unit}}
            constants = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 4, "INPUT_PRECISION": None,
                         "UPCAST": False, "INT64": True, "FP8_WGMMA": False, "IMPRECISE": 0, **{n: 1 for n in unit}}
            cases.append({"device": device, "signature": signature, "constants": constants})
    assert compile_errors("xmfu.kernels.matmul", "_matmul_kernel", cases) == [None] * len(cases)
