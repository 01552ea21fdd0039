"""The attention kernels compiled for Hopper (sm90) on this CPU by Triton's own compiler (issue 41 item 5): the
backward configs kept on sm90 multiply by wgmma only, the 32-row ones they replace by mma.sync, and the `triton`
forward's off-band key loop loads without a mask."""

from __future__ import annotations

import importlib

import pytest

from xmfu.harness.machine import compat

if compat.triton_interpreter_too_old():  # the kernels cannot even be defined (triton 3.2 and 3.3 on a CPU)
    pytest.skip(compat.triton_interpreter_too_old(), allow_module_level=True)

from tests.workloads.triton_front_end import compiled
from xmfu.kernels import flash_attention_common as common

FA, FA2 = "xmfu.kernels.flash_attention", "xmfu.kernels.flash_attention_fa2"
FP32_POINTERS = {"LSE", "DELTA"}  # and fa2's DQ, accumulated in fp32 by atomic adds
BF16_POINTERS = {"Q", "K", "V", "Out", "DO", "DQ", "DK", "DV"}


def _case(module: str, kernel: str, config, **constants) -> dict:
    """`kernel` of `module` for sm90 at one autotune config: bf16 operands, head dim 128, causal; every pointer and
    stride a multiple of 16 as a launch on (B, H, S, 128) tensors would specialise them."""
    fn = getattr(importlib.import_module(module), kernel)
    while not hasattr(fn, "arg_names"):
        fn = fn.fn  # the Autotuner and heuristics wrappers around the jit function
    constants = {"HEAD_DIM": 128, "BLOCK_D": 128, "IS_CAUSAL": True, "UPCAST": False, "PRECISION": None,
                 **config.kwargs, **constants}
    signature = {}
    for name in (n for n in fn.arg_names if n not in constants):
        if name in FP32_POINTERS or (name == "DQ" and module == FA2):
            signature[name] = "*fp32"
        elif name in BF16_POINTERS:
            signature[name] = "*bf16"
        else:
            signature[name] = "fp32" if name.endswith("scale") else "i32"
    return {"kernel": kernel, "device": "sm90", "signature": signature, "constants": constants,
            "divisible": [n for n in signature if signature[n].startswith("*") or n.startswith("stride")],
            "compile": {"num_warps": config.num_warps, "num_stages": config.num_stages}}


def _dots(ttgir: str) -> tuple[int, int]:
    """(wgmma dots, dots left to mma.sync or FMA) in a kernel's TTGIR."""
    wgmma = sum(1 for line in ttgir.splitlines() if "ttng.warp_group_dot " in line)
    return wgmma, sum(1 for line in ttgir.splitlines() if "tt.dot " in line)


def _smallest_sm90(module: str):
    """The kept sm90 backward config of the fewest rows (BLOCK_M x BLOCK_N): the one nearest the 64-row bound."""
    tiles = importlib.import_module(module).BWD_TILES["nvidia"]
    kept = common.for_capability(common.vendor_configs("nvidia", tiles), 9, common.BWD_ROWS)
    return min(kept, key=lambda c: c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"])


@pytest.mark.long  # the slow group (make test-slow): Triton's whole compiler, five kernels, 117 s here (2 shared cores)
@pytest.mark.slow(seconds=120)
def test_on_hopper_the_kept_backward_configs_use_wgmma_and_the_forward_skips_the_mask_off_the_band():
    """Before: the backward's BLOCK_M 32 configs were timed on sm90 too, their dQ-side dots (M = BLOCK_M) on mma.sync
    (Triton's supportMMA v3: M % 64), and the forward masked every key block's loads. Every config of every target
    is `xmfu kernels`'s to compile; here the dropped config's kernel, the forward, and each backward kernel at the
    smallest config kept on sm90."""
    dropped = common.vendor_configs("nvidia", [(32, 64, 4, 2)])[0]
    fwd = common.vendor_configs("nvidia", [(128, 64, 8, 3)])[0]
    kept = _smallest_sm90(FA)
    assert (kept.kwargs["BLOCK_M"], kept.kwargs["BLOCK_N"]) == (64, 64)
    results = compiled(FA, [_case(FA, "_attn_bwd_dq", dropped), _case(FA, "_attn_fwd", fwd),
                            _case(FA, "_attn_bwd_dkdv", kept), _case(FA, "_attn_bwd_dq", kept)])
    results += compiled(FA2, [_case(FA2, "_attn_bwd", _smallest_sm90(FA2), EVEN_M=True, EVEN_N=True)])
    assert [r["error"] for r in results] == [None] * 5
    assert _dots(results[0]["ttgir"]) == (0, 3)  # BLOCK_M 32: S, dP and dQ all by mma.sync
    assert _dots(results[1]["ttgir"]) == (4, 0)  # the forward: S and P V in each of its two loops
    # dK/dV 4 GEMMs (Sᵀ, dV, dPᵀ, dK) and dQ 3 (S, dP, dQ): the `triton` backward's 7; triton_fa2's 5 in one kernel,
    # written once in its on-band loop and once in its off-band one
    assert [_dots(r["ttgir"]) for r in results[2:]] == [(4, 0), (3, 0), (10, 0)]
    loops = results[1]["ttir"].split("scf.for ")
    assert len(loops) == 3  # off the band, then the band
    loads = [line for line in loops[1].splitlines() if "tt.load " in line]  # the first loop's K and V
    assert len(loads) == 2 and all("," not in line.split("tt.load ")[1].split(":")[0] for line in loads)
