"""Matmul FLOP and byte formulas against hand computations and against torch's and XLA's own counts."""

from __future__ import annotations

import numpy as np
import pytest

from xmfu.workloads.matmul.spec import MatmulCase, expand


def test_flops_is_two_mnk():
    assert MatmulCase(2, 3, 4, "fp32").flops() == 48  # 2*3 outputs x 4 multiply-adds x 2 FLOPs
    assert MatmulCase(2048, 2048, 2048, "bf16").flops() == 2 * 2048**3


def test_bytes_read_inputs_once_write_output_once():
    assert MatmulCase(2, 3, 4, "fp32").bytes_moved() == (2 * 4 + 4 * 3 + 2 * 3) * 4
    assert MatmulCase(2, 3, 4, "bf16").bytes_moved() == (8 + 12 + 6) * 2
    assert MatmulCase(2, 3, 4, "fp8").bytes_moved() == (8 + 12) * 1 + 6 * 2  # fp8 in, bf16 out


def test_flops_match_torch_flop_counter():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    case = MatmulCase(37, 19, 23, "fp32")
    a, b = (torch.from_numpy(x) for x in case.stored_inputs())
    with FlopCounterMode(display=False) as counter:
        torch.matmul(a, b)
    assert counter.get_total_flops() == case.flops()


def test_flops_match_xla_cost_analysis():
    jax = pytest.importorskip("jax")
    case = MatmulCase(64, 32, 16, "fp32")
    a, b = case.stored_inputs()
    cost = jax.jit(lambda x, y: x @ y).lower(a, b).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    if not cost or "flops" not in cost:
        pytest.skip("this jaxlib reports no cost analysis")
    assert cost["flops"] == pytest.approx(case.flops())


def test_inputs_are_seeded_uniform_and_representable():
    a1, _ = MatmulCase(8, 8, 8, "bf16", seed=3).stored_inputs()
    a2, _ = MatmulCase(8, 8, 8, "bf16", seed=3).stored_inputs()
    np.testing.assert_array_equal(a1, a2)
    assert a1.min() >= -1 and a1.max() <= 1 and np.unique(a1).size > 10
    import ml_dtypes

    np.testing.assert_array_equal(a1, a1.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_transposed_storage_and_reference():
    case = MatmulCase(5, 3, 4, "fp32", transpose_a=True, transpose_b=True)
    a, b = case.stored_inputs()
    assert a.shape == (4, 5) and b.shape == (3, 4)
    assert case.check(a.T.astype(np.float64) @ b.T.astype(np.float64)).ok


def test_check_rejects_tf32_like_error_for_fp32():
    case = MatmulCase(128, 128, 512, "fp32")
    a, b = (x.astype(np.float64) for x in case.stored_inputs())
    # Round operands to TF32's 10 mantissa bits, as a tensor core would.
    tf32 = [np.frombuffer((x.astype(np.float32).view(np.uint32) & 0xFFFFE000).tobytes(), np.float32).reshape(x.shape)
            for x in (a, b)]
    result = case.check(tf32[0].astype(np.float64) @ tf32[1].astype(np.float64))
    assert not result.ok and result.error > 1e-5


def test_large_cases_check_edge_and_sampled_rows():
    case = MatmulCase(4096, 4096, 1024, "bf16")
    rows = case.check_rows()
    assert rows is not None and 0 in rows and 4095 in rows and len(rows) < 100
    assert MatmulCase(64, 64, 64, "bf16").check_rows() is None


def test_expand_sizes_and_shapes():
    cases = expand({"name": "matmul", "sizes": [8], "shapes": [[4, 5, 6]]}, "fp16", 0)
    assert [(c.m, c.n, c.k) for c in cases] == [(8, 8, 8), (4, 5, 6)]
    assert cases[0].case_id == "matmul-fp16-8x8x8-NN"


def test_naming_shapes_replaces_the_default_sizes():
    from xmfu.workloads.matmul.spec import expand

    def shapes(**workload):
        return [(c.m, c.n, c.k) for c in expand({"name": "matmul", "sizes": None, "shapes": [], **workload}, "bf16", 0)]

    assert shapes() == [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192)]
    assert shapes(shapes=[[8192, 8192, 1024]]) == [(8192, 8192, 1024)]
    assert shapes(shapes=[[8192, 8192, 1024]], sizes=[64]) == [(64, 64, 64), (8192, 8192, 1024)]
