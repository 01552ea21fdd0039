"""workload=grouped_matmul: the split of rows over groups, FLOPs against torch's counter, the MoE presets' shapes,
and every backend (torch, xmfu's persistent Triton kernel in the interpreter, JAX ragged_dot) against fp64."""

from __future__ import annotations

import json

import pytest
import yaml

from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.machine import compat
from xmfu.workloads.grouped_matmul import jax as jax_backend
from xmfu.workloads.grouped_matmul import torch as torch_backend
from xmfu.workloads.grouped_matmul import triton as triton_backend
from xmfu.workloads.grouped_matmul.spec import DEFAULT_SHAPES, GroupedMatmulCase, expand

BACKENDS = {"torch": torch_backend, "jax": jax_backend, "triton": triton_backend}


def test_splits_cover_every_row_and_random_ones_are_uneven_and_seeded():
    even = GroupedMatmulCase(8, 100, 16, 16, "fp32", "even")
    assert even.group_sizes().tolist() == [13, 13, 13, 13, 12, 12, 12, 12]
    rand = GroupedMatmulCase(8, 100, 16, 16, "fp32", "random")
    assert rand.group_sizes().sum() == 100 and rand.params()["imbalance"] > 1
    assert rand.group_sizes().tolist() == GroupedMatmulCase(8, 100, 16, 16, "bf16", "random").group_sizes().tolist()
    assert rand.offsets()[0] == 0 and rand.offsets()[-1] == 100 and len(rand.offsets()) == 9


def test_default_shapes_are_the_moe_presets_expert_gemms():
    for (groups, m, n, k), name in zip(DEFAULT_SHAPES, ("moe-small", "mixtral-8x7b", "deepseek-v3"), strict=True):
        p = yaml.safe_load((CONFIG_DIR / "model" / f"{name}.yaml").read_text())
        top_k = p.get("top_k", 2)  # the declared default (workloads/transformer/spec.py ModelSpec.top_k)
        assert (groups, m, n, k) == (p["n_experts"], p["batch"] * p["seq_len"] * top_k, p["expert_hidden"],
                                     p["d_model"]), name


def test_flops_are_what_the_flop_counter_counts_over_the_groups():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    case = GroupedMatmulCase(4, 90, 24, 40, "fp32", "random")
    x = case.inputs()
    a, b = torch.from_numpy(x["a"]), torch.from_numpy(x["b"])
    with FlopCounterMode(display=False) as counter:
        for g, rows in enumerate(a.split(x["group_sizes"].tolist())):
            rows @ b[g]
    assert counter.get_total_flops() == case.flops() == 2 * 90 * 24 * 40


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="G, M, N, K"):
        expand({"name": "grouped_matmul", "shapes": [[4, 64, 64]]}, "bf16", 0)
    with pytest.raises(ConfigError, match="not a grouped matmul dtype"):
        expand({"name": "grouped_matmul"}, "fp8", 0)


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_backend_matches_fp64_on_uneven_groups(backend, dtype, cpu_ctx):
    # empty groups (seed 3: sizes 4, 4, 2, 1, 0, ...), groups of fewer rows than a tile, N and K that are not
    # multiples of the Triton tile
    case = GroupedMatmulCase(16, 40, 72, 40, dtype, "random", seed=3)
    assert 0 in case.group_sizes()
    module = BACKENDS[backend]
    if backend == "triton":  # an interpreter too old for xmfu's kernels refuses every case (scripts/compat.sh)
        from xmfu.harness.machine import compat

        if why := compat.triton_interpreter_too_old():
            pytest.skip(f"this stack cannot run it: {why}")
    ok, why = module.available(case, cpu_ctx)
    assert ok, why
    prepared = module.prepare(case, cpu_ctx)
    out = prepared.result(case.check_rows())
    assert case.check(out).ok, case.check(out)
    wrong = out.copy()
    wrong[case.offsets()[9]] *= 1.5  # the first row of group 9 (10 rows), past the empty groups 4 and 7
    assert not case.check(wrong).ok


def test_large_cases_check_every_groups_edge_rows():
    case = GroupedMatmulCase(8, 8192, 14336, 4096, "bf16", "random")
    rows = case.check_rows()
    offsets = case.offsets()
    assert set(offsets[:-1]) <= set(rows) and set(offsets[1:] - 1) <= set(rows)


class LoopPlugin:
    """A grouped-matmul plug-in as docs/backends.md describes one (one torch.matmul per group, standing in for a
    kernel engineer's grouped GEMM)."""

    workload = "grouped_matmul"
    frameworks = ("torch",)

    def available(self, case, ctx):
        return True, ""

    def prepare(self, case, ctx):
        import torch

        from xmfu.plugin import Prepared, to_torch, torch_rows

        x = case.inputs()
        a, b = (to_torch(x[n], case.dtype, ctx.torch_device) for n in ("a", "b"))
        sizes = x["group_sizes"].tolist()

        def call():
            return torch.cat([rows @ b[g] for g, rows in enumerate(a.split(sizes))])

        return Prepared(call, lambda rows: torch_rows(call(), rows), "torch")


def test_a_plugin_runs_beside_the_builtin_backends(cli, tmp_path):
    plugin = "tests.workloads.test_grouped_matmul:LoopPlugin"
    done = cli("run", "workload=grouped_matmul", "workload.shapes=[[4,128,64,64]]", "dtype=fp32", "timing=quick",
               "timing.max_time_s=0.3", "timing.warmup_s=0", f"backends=[torch,{plugin}]", f"results_dir={tmp_path}",
               "run_id=g")
    assert done.returncode in (0, 3), done.stderr
    rows = [json.loads(line) for line in (tmp_path / "g" / "cases.jsonl").read_text().splitlines()]
    assert [(r["backend"], r["status"]) for r in rows] == [("torch", "ok"), (plugin, "ok")]
    assert rows[1]["flops"] == 2 * 128 * 64 * 64 and rows[1]["params"]["group_sizes"] == [35, 34, 27, 32]


def _kernel_case(device: str, dtype: str, precision: str | None) -> dict:
    ints = ("G", "N", "K", "stride_am", "stride_ak", "stride_bg", "stride_bk", "stride_bn", "stride_cm", "stride_cn")
    return {"device": device, "signature": {"a_ptr": f"*{dtype}", "b_ptr": f"*{dtype}", "c_ptr": f"*{dtype}",
                                            "offsets_ptr": "*i32", **{n: "i32" for n in ints}},
            "constants": {"NUM_PROGRAMS": 132, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64,
                          "INPUT_PRECISION": precision, "UPCAST": False}}


@pytest.mark.skipif(bool(compat.triton_interpreter_too_old()), reason="tests/workloads/triton_front_end.py drives the "
                    "compiler API of Triton 3.4 and later (as test_matmul_triton_targets.py)")
def test_the_persistent_kernel_lowers_for_nvidia_and_amd_targets():
    """The interpreter runs Python; Triton's own front end (tests/workloads/triton_front_end.py) lowers the kernel
    for real targets without a GPU: its data-dependent `while` over each group's tiles included."""
    from tests.workloads.triton_front_end import compile_errors

    targets = ("sm80", "sm90", "gfx942")
    cases = [_kernel_case(d, "bf16", None) for d in targets] + [_kernel_case(d, "fp32", "ieee") for d in targets]
    assert compile_errors("xmfu.kernels.grouped_matmul", "_grouped_matmul_kernel", cases) == [None] * len(cases)


@pytest.mark.skipif(bool(compat.triton_interpreter_too_old()), reason="tests/workloads/triton_front_end.py drives the "
                    "compiler API of Triton 3.4 and later (as test_matmul_triton_targets.py)")
def test_the_persistent_kernel_multiplies_by_wgmma_on_hopper():
    """Compiled for sm90 through ptxas at the GPU tile (128x128x64, 8 warps; 3 s here): bf16 tiles go to wgmma, the
    tensor cores' Hopper instruction, not the older mma.sync."""
    from tests.workloads.triton_front_end import compiled

    case = {**_kernel_case("sm90", "bf16", None), "kernel": "_grouped_matmul_kernel",
            "compile": {"num_warps": 8, "num_stages": 3},
            "divisible": ["a_ptr", "b_ptr", "c_ptr", "N", "K", "stride_am", "stride_bg", "stride_bk", "stride_cm"]}
    case["constants"] = {**case["constants"], "stride_ak": 1, "stride_bn": 1, "stride_cn": 1}
    case["signature"] = {k: v for k, v in case["signature"].items() if k not in ("stride_ak", "stride_bn", "stride_cn")}
    (result,) = compiled("xmfu.kernels.grouped_matmul", [case])
    assert result["error"] is None, result["error"]
    assert "wgmma.mma_async" in result["ptx"]
