"""The roofline (harness/machine/roofline.py): each case's bound, speed-of-light time and share of it, and the floor
under which a time is not physical."""

from __future__ import annotations

import pytest

from tests.conftest import gpu_device
from xmfu.harness.machine.peaks import BandwidthPeak, Peak, lookup, lookup_membw
from xmfu.harness.machine.roofline import FLOOR_SHARE, INVALID, Roofs, Work, faster_than_roofline, median_of, place
from xmfu.workloads.attention.spec import AttentionCase
from xmfu.workloads.collectives.spec import CollectiveCase
from xmfu.workloads.matmul.spec import MatmulCase
from xmfu.workloads.membw.spec import MembwCase

H100 = gpu_device("NVIDIA H100 80GB HBM3", 132, cache_bytes=50 * 2**20)


def _roofs(dtype: str, device=H100) -> Roofs:
    return Roofs(lookup(device, dtype), lookup_membw(device), device.cache_bytes)


def _place(case, median=None, device=H100):
    return place(Work.of(case), _roofs(case.dtype, device), median)


def test_a_large_matmul_is_compute_bound_and_its_sol_is_flops_over_the_peak():
    case = MatmulCase(8192, 8192, 8192, "bf16")
    r = _place(case, median=2 * case.flops() / 989e12)
    assert r["bound"] == "compute" and r["ridge"] == pytest.approx(989e3 / 3350)  # 295 FLOPs per byte
    assert r["sol_s"] == pytest.approx(case.flops() / 989e12) and r["sol_fraction"] == pytest.approx(0.5)
    assert r["intensity"] == pytest.approx(8192 / 3)  # 2n^3 / (3 n^2 x 2 bytes)
    assert r["note"] is None and r["floor_flops"] is None and r["off_roofline"] is None


def test_a_small_matmul_and_every_stream_kernel_are_memory_bound():
    small = _place(MatmulCase(512, 512, 512, "bf16"))  # intensity 170 < 295
    assert small["bound"] == "memory" and small["sol_s"] == pytest.approx(3 * 512 * 512 * 2 / 3.35e12)
    for kernel in ("copy", "scale", "add", "triad"):
        case = MembwCase(kernel, 2**28, "fp32")
        r = _place(case, median=case.bytes_moved() / 3.0e12)  # 3.0 of the 3.35 TB/s
        assert r["bound"] == "memory" and r["sol_fraction"] == pytest.approx(3.0 / 3.35)


def test_a_cpu_has_no_memory_roof_so_no_bound_but_a_compute_floor(cpu_ctx):
    case = MatmulCase(128, 128, 128, "fp32")
    roofs = Roofs(Peak(0.1, "estimate", "cpu-estimate", ""), lookup_membw(cpu_ctx.device), 2**25)
    r = place(Work.of(case), roofs, 1e-3)
    assert r["bound"] is None and r["sol_s"] is None and r["sol_fraction"] is None
    assert "no memory roof" in r["note"] and r["floor_s"] == pytest.approx(FLOOR_SHARE * case.flops() / 0.1e12)


def test_the_floor_leaves_out_what_the_last_level_cache_may_hold():
    roofs = Roofs(Peak(None, None, None, "no FLOPs"), BandwidthPeak(1000.0, "table", "x", ""), 50 * 2**20)
    assert place(Work(0, 40 * 2**20), roofs, None)["floor_s"] is None  # fits in the cache: no floor
    r = place(Work(0, 150 * 2**20), roofs, None)
    assert r["floor_s"] == pytest.approx(FLOOR_SHARE * 100 * 2**20 / 1e12) and r["bound"] == "memory"


def test_an_override_roof_sets_the_sol_figures_but_no_floor():
    """A roof given in the config may be below the part's: an honest time must not be failed by it."""
    roofs = Roofs(Peak(10.0, "config override", "override", ""), BandwidthPeak(100.0, "override", "override", ""),
                  None)
    r = place(Work(1e12, 1e9), roofs, 1e-3)
    assert r["sol_s"] == pytest.approx(0.1) and r["floor_s"] is None


def test_a_time_under_the_floor_is_invalid_and_one_at_it_is_not():
    case = MatmulCase(4096, 4096, 4096, "bf16")
    r = _place(case)
    assert faster_than_roofline(r, r["floor_s"]) is None
    why = faster_than_roofline(r, r["floor_s"] / 100)
    assert why.startswith(INVALID) and "989 TFLOP/s" in why


def test_the_floor_counts_the_work_no_kernel_avoids_not_a_convention_that_credits_more():
    """fa2's causal count (half of seq_q x seq_kv) credits a 128-query top-left block against 8192 keys with 64x
    the entries the mask keeps: the floor must count those, or an honest kernel reads faster than the roofline."""
    kw = dict(batch=4, heads=16, kv_heads=16, seq_q=128, seq_kv=8192, head_dim=128, causal=True,
              alignment="top_left", scale=128**-0.5, dtype="bf16", mode="fwd")
    fa2, exact = AttentionCase(**kw, flop_convention="fa2"), AttentionCase(**kw, flop_convention="exact")
    assert fa2.flops() / exact.flops() > 60
    r = _place(fa2)
    assert r["floor_flops"] == pytest.approx(exact.flops()) and _place(exact)["floor_flops"] is None
    honest = exact.flops() / 989e12 / 0.9  # 90% of the peak on the work done: 58x "faster" than fa2's count allows
    assert faster_than_roofline(r, max(honest, r["floor_s"])) is None


def test_a_collective_is_off_the_roofline():
    case = CollectiveCase("all_reduce", 2**30, "bf16", False, "throughput")
    r = _place(case, median=1e-3)
    assert r["off_roofline"] and r["bound"] is None and r["floor_s"] is None and r["sol_fraction"] is None


def test_a_workload_without_traffic_is_placed_under_the_compute_roof_only():
    r = place(Work(1e12, 0.0), _roofs("bf16"), 0.01)
    assert r["bound"] == "compute" and r["intensity"] is None and "no minimum traffic" in r["note"]


def test_the_median_is_the_summarys_median_of_repeat_medians():
    assert median_of([1.0, 2.0, 3.0], []) == 2.0
    assert median_of([1.0, 1.0, 5.0, 5.0, 5.0], [0, 0, 1, 1, 1]) == 3.0
