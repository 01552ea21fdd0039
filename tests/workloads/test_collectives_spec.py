"""nccl-tests conventions: bus factors, sizes, layouts, and the exact-result data for every operation."""

from __future__ import annotations

import numpy as np
import pytest

from xmfu.harness.engine.declare import ConfigError
from xmfu.workloads.collectives.spec import (
    OPS,
    CollectiveCase,
    bus_factor,
    expand,
    expected_output,
    layout,
    parse_bytes,
    rank_input,
    size_sweep,
)
from xmfu.workloads.collectives.summary import alpha_beta


@pytest.mark.parametrize("n", [2, 4, 8])
def test_bus_factors_for_every_collective(n):
    assert bus_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n)
    for op in ("all_gather", "reduce_scatter", "all_to_all", "all_to_all_v"):
        assert bus_factor(op, n) == pytest.approx((n - 1) / n)
    assert bus_factor("broadcast", n) == 1.0
    assert all(bus_factor(op, 1) is None for op in OPS)  # one rank: no bus


def test_bandwidth_uses_the_operation_size_definition():
    case = CollectiveCase("all_gather", 4096, "fp32", False, "throughput")
    bw = case.bandwidth(1e-3, 4)  # S = whole output = 4096 B, algbw = S / t
    assert bw["algbw_gbps"] == pytest.approx(4096 / 1e-3 / 1e9)
    assert bw["busbw_gbps"] == pytest.approx(bw["algbw_gbps"] * 0.75)
    one = CollectiveCase("all_reduce", 4096, "fp32", True, "throughput").bandwidth(1e-3, 1)
    assert one["busbw_gbps"] is None and "not applicable" in one["busbw_note"]


def test_sizes_like_nccl_tests():
    assert parse_bytes("s", "64K") == 65536 and parse_bytes("s", "1M") == 2**20 and parse_bytes("s", 8) == 8
    assert size_sweep({"start": 8, "end": "128", "factor": 2}) == [8, 16, 32, 64, 128]
    assert size_sweep(["1K", "4K"]) == [1024, 4096]
    with pytest.raises(ConfigError):
        parse_bytes("s", "-5")
    with pytest.raises(ConfigError):
        size_sweep({"start": 64, "end": 8, "factor": 2})


def _simulate(op: str, n: int, size: int) -> list[np.ndarray]:
    """What each rank ends with, computed from the inputs the way the collective is defined."""
    lay = layout(op, size, 2, n)
    inputs = [rank_input(op, r, lay) for r in range(n)]
    if op == "all_reduce":
        return [sum(inputs)] * n
    if op == "broadcast":
        return [inputs[0]] * n
    if op == "all_gather":
        return [np.concatenate(inputs)] * n
    if op == "reduce_scatter":
        total, c = sum(inputs), lay.output_count
        return [total[r * c:(r + 1) * c] for r in range(n)]
    if op == "all_to_all_v":  # rank q's buffer cut at its send counts; rank r receives piece r of every rank
        pieces = [np.split(inputs[q], np.cumsum(lay.sends(q))[:-1]) for q in range(n)]
        return [np.concatenate([pieces[q][r] for q in range(n)]) for r in range(n)]
    c = lay.output_count // n  # all_to_all: rank r receives chunk r of every rank, in rank order
    return [np.concatenate([inputs[q][r * c:(r + 1) * c] for q in range(n)]) for r in range(n)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [2, 3, 4])
def test_expected_outputs_match_the_definition_of_each_collective(op, n):
    for r, got in enumerate(_simulate(op, n, 1000)):
        np.testing.assert_array_equal(expected_output(op, r, n, layout(op, 1000, 2, n)), got)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_all_to_all_v_splits_are_uneven_and_its_size_is_the_mean_send_buffer(n):
    lay = layout("all_to_all_v", 64 * 1024, 2, n)  # 32768 elements a rank, 32768 / n per pair when even
    sends = np.array(lay.splits)
    assert sends.shape == (n, n) and sends.min() >= 1 and len(set(sends.flatten())) > n  # every pair its own
    assert sends.max() > 1.2 * (32768 // n) and sends.min() < 0.8 * (32768 // n)
    assert lay.bytes == sends.sum() * 2 // n  # S: all ranks' bytes / n, alltoall's S for even splits
    assert lay.input_count == sends.sum(axis=1).max() and lay.output_count == sends.sum(axis=0).max()
    assert [lay.receives(r) for r in range(n)] == sends.T.tolist()
    bw = CollectiveCase("all_to_all_v", 64 * 1024, "bf16", False, "throughput").bandwidth(1e-3, n)
    assert bw["size_bytes_actual"] == lay.bytes and bw["bus_factor"] == pytest.approx((n - 1) / n)


def test_data_is_exact_in_bf16_and_differs_per_rank():
    import ml_dtypes

    lay = layout("all_reduce", 4096, 2, 128)
    total = expected_output("all_reduce", 0, 128, lay)
    np.testing.assert_array_equal(total.astype(ml_dtypes.bfloat16).astype(np.float32), total)
    assert not np.array_equal(rank_input("all_reduce", 0, lay), rank_input("all_reduce", 1, lay))


def test_alpha_beta_fit_recovers_latency_and_bandwidth():
    sizes = [2.0**k for k in range(10, 26)]
    alpha, beta, factor = 5e-6, 100e9, 1.5
    fit = alpha_beta(sizes, [alpha + s * factor / beta for s in sizes], factor)
    assert fit["alpha_us"] == pytest.approx(5.0, rel=1e-3) and fit["beta_gbps"] == pytest.approx(100, rel=1e-3)
    assert fit["half_bandwidth_bytes"] == pytest.approx(alpha * beta / factor, rel=1e-3)


def test_expand_sweeps_ops_places_and_modes():
    cases = expand({"name": "collectives", "ops": ["all_reduce", "all_gather"], "sizes": ["1K", "2K"],
                    "in_place": [False, True], "mode": ["throughput", "latency"]}, "fp32", 0)
    assert len(cases) == 2 * 2 * 2 * 2
    with pytest.raises(ConfigError, match="ops"):
        expand({"name": "collectives", "ops": ["gossip"]}, "fp32", 0)
    with pytest.raises(ConfigError, match="collectives dtype"):
        expand({"name": "collectives"}, "fp8", 0)


def test_the_default_plan_has_no_placement_torch_cannot_express():
    from xmfu.workloads.collectives.spec import expand
    from xmfu.workloads.collectives.torch_dist import NOT_IN_TORCH

    cases = expand({"name": "collectives", "ops": ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                                   "broadcast"], "sizes": ["1K"]}, "fp32", 0)
    assert not [c for c in cases if (c.op, c.in_place) in NOT_IN_TORCH]
    assert {(c.op, c.in_place) for c in cases if c.op == "all_gather"} == {("all_gather", False),
                                                                            ("all_gather", True)}
    explicit = expand({"name": "collectives", "ops": ["all_reduce"], "sizes": ["1K"], "in_place": [False]}, "fp32", 0)
    assert [c.in_place for c in explicit] == [False]  # asked for explicitly: kept (and skipped with the reason)
