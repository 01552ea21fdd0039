"""How the attention kernels are launched (issue 41 items 5 and 6), without running them: every launch's grid
recorded from meta tensors, the `triton` backward's delta kernel, and the configs kept on NVIDIA sm90 and later."""

from __future__ import annotations

import pytest
import torch

from xmfu.harness.machine import compat

if compat.triton_interpreter_too_old():  # the kernels cannot even be defined (triton 3.2 and 3.3 on a CPU)
    pytest.skip(compat.triton_interpreter_too_old(), allow_module_level=True)

from xmfu.kernels import flash_attention as fa
from xmfu.kernels import flash_attention_common as common
from xmfu.kernels import flash_attention_fa2 as fa2
from xmfu.kernels import flash_decoding

META = {"BLOCK_M": 64, "BLOCK_N": 64}  # any config: the grid's axes 1 and 2 do not depend on it


class Recorder:
    """Stands in for a kernel: `kernel[grid](...)` records the grid (evaluated for META) and launches nothing."""

    def __init__(self, name: str, grids: dict[str, tuple[int, ...]]) -> None:
        self.name, self.grids = name, grids

    def __getitem__(self, grid):
        def launch(*args, **kwargs) -> None:
            self.grids[self.name] = tuple(grid(META) if callable(grid) else grid)

        return launch


@pytest.fixture
def grids(monkeypatch) -> dict[str, tuple[int, ...]]:
    seen: dict[str, tuple[int, ...]] = {}
    for module, names in ((fa, ("_attn_fwd", "_attn_bwd_dkdv", "_attn_bwd_dq")), (common, ("_attn_bwd_delta",)),
                          (fa2, ("_attn_fwd", "_attn_bwd")), (flash_decoding, ("_decode_split", "_decode_combine"))):
        for name in names:
            monkeypatch.setattr(module, name, Recorder(f"{module.__name__.rsplit('.', 1)[1]}.{name}", seen))
    return seen


def _meta(batch: int, heads: int, seq: int, dim: int = 128) -> torch.Tensor:
    return torch.empty(batch, heads, seq, dim, device="meta", dtype=torch.bfloat16)


def test_a_decode_sweep_of_batch_2048_by_32_heads_launches_within_the_grid(grids):
    """Before: one program per (range, batch x kv head) on axis 1, 2048 x 32 = 65536 programs, one more than CUDA
    launches there (gridDim.y <= 65535): every kernel now puts the head on axis 1 and the batch on axis 2."""
    q, cache = _meta(2048, 32, 1), _meta(2048, 32, 4096)
    flash_decoding.flash_decode(q, cache, cache, 4000, splits=4)
    q, kv = _meta(2048, 32, 64), _meta(2048, 32, 64)
    for kernel in (fa, fa2):
        kernel.flash_attention(q, kv, kv)
    fa._grads(q, kv, kv, q, q, torch.empty(q.shape[:3], device="meta"), True, 0, 0.1)
    fa2._grads(q, kv, kv, q, q, torch.empty(q.shape[:3], device="meta"), True, 0, 0.1)
    assert set(grids) == {"flash_attention._attn_fwd", "flash_attention._attn_bwd_dkdv", "flash_attention._attn_bwd_dq",
                          "flash_attention_common._attn_bwd_delta", "flash_attention_fa2._attn_fwd",
                          "flash_attention_fa2._attn_bwd", "flash_decoding._decode_split",
                          "flash_decoding._decode_combine"}
    for name, grid in grids.items():
        assert all(n <= common.GRID_YZ_MAX for n in grid[1:]), (name, grid)
        assert grid[0] < 2**31, (name, grid)
    assert grids["flash_decoding._decode_split"] == (4, 32, 2048)


@pytest.mark.parametrize("batch, heads", [(70_000, 1), (1, 70_000)])
def test_a_batch_or_head_count_past_the_grid_is_refused_saying_why(batch, heads):
    q = _meta(batch, heads, 1, 16)
    with pytest.raises(ValueError, match="65535 programs"):
        fa.flash_attention(q, q, q)
    with pytest.raises(ValueError, match="65535 programs"):
        flash_decoding.flash_decode(q, q, q, 1, splits=1)


def test_the_triton_backward_computes_delta_in_a_triton_kernel(grids, monkeypatch):
    """Before: `(o.float() * do.float()).sum(-1)` in torch, inside the timed backward (four fp32 copies' traffic)."""
    monkeypatch.setattr(torch.Tensor, "sum", lambda *a, **k: pytest.fail("delta summed in torch"))
    q = _meta(2, 4, 64)
    fa._grads(q, q, q, q, q, torch.empty(q.shape[:3], device="meta"), False, 0, 0.1)
    assert grids["flash_attention_common._attn_bwd_delta"] == (1, 4, 2)


def test_the_delta_kernel_matches_the_row_sums():
    g = torch.Generator().manual_seed(2)
    o, do = (torch.randn(2, 3, 37, 80, generator=g) for _ in range(2))
    torch.testing.assert_close(common.bwd_delta(o, do), (o * do).sum(-1), rtol=1e-5, atol=1e-5)


def test_no_config_left_on_sm90_and_later_has_a_dot_of_fewer_than_64_rows():
    """wgmma and tcgen05 need M % 64 (Triton's supportMMA); before, the backward's BLOCK_M 32 configs ran their dQ
    dots on mma.sync on Hopper. BLOCK_N is the dK/dV dots' M."""
    for module in (fa, fa2):
        backward = common.vendor_configs("nvidia", module.BWD_TILES["nvidia"])
        forward = common.vendor_configs("nvidia", module.FWD_TILES["nvidia"])
        assert common.for_capability(backward, 8, common.BWD_ROWS) == backward  # sm80 keeps every config
        for major in (9, 10):
            kept = common.for_capability(backward, major, common.BWD_ROWS)
            assert kept and all(c.kwargs["BLOCK_M"] % 64 == 0 and c.kwargs["BLOCK_N"] % 64 == 0 for c in kept)
            assert all(c.kwargs["BLOCK_M"] % 64 == 0 for c in common.for_capability(forward, major, common.FWD_ROWS))
        assert len(common.for_capability(backward, 9, common.BWD_ROWS)) < len(backward)


def test_the_autotuners_prune_for_the_target_triton_compiles_for_and_leave_the_interpreter_alone(monkeypatch):
    """The target is Triton's (its driver's get_current_target: the GPU's, or the one `xmfu kernels` compiles for on
    a CPU), not a tensor's device: meta tensors have none, and the sweep compiled configs a GPU would prune."""
    from xmfu.kernels import fit

    backward = common.vendor_configs("nvidia", fa.BWD_TILES["nvidia"])
    prune = common.pruner(common.BWD_ROWS)["early_config_prune"]
    assert fit.current_arch() is None  # no GPU here: no target, nothing pruned
    assert prune(backward, {"Q": torch.empty(1)}) == backward
    monkeypatch.setattr(fit, "current_arch", lambda: "sm90")
    assert prune(backward, {"Q": torch.empty(1, device="meta")}) == common.for_capability(backward, 9, common.BWD_ROWS)
    assert fa._attn_bwd_dq.early_config_prune is not None and fa2._attn_bwd.early_config_prune is not None


@pytest.mark.parametrize("batch, heads", [(65_536, 1), (1, 65_536)])
def test_the_triton_backends_skip_a_case_past_the_grid_before_any_kernel_runs(batch, heads, cpu_ctx):
    from xmfu.workloads.attention import triton as backend
    from xmfu.workloads.attention.spec import AttentionCase

    assert backend.GRID_YZ_MAX == common.GRID_YZ_MAX
    case = AttentionCase(batch, heads, 1, 16, 16, 64, False, "top_left", 0.125, "bf16", "fwd")
    ok, why = backend.available(case, cpu_ctx)
    assert not ok and "65535 programs" in why
    assert backend.available(AttentionCase(2048, 32, 8, 1, 4096, 128, False, "top_left", 0.1, "bf16", "fwd"),
                             cpu_ctx) == (True, "")
