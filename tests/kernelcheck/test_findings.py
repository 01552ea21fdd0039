"""What `xmfu kernels` holds a compile to (harness/kernelcheck/findings.py), the cases it knows, and how a sweep is
printed (page.py): on made-up compiles, no compiler."""

from __future__ import annotations

import json
from dataclasses import replace

from xmfu.harness.kernelcheck import findings, page
from xmfu.harness.kernelcheck.facts import Facts
from xmfu.harness.kernelcheck.findings import (
    COMPILE,
    MMA_SYNC,
    NO_MMA,
    SHARED,
    SPILLS,
    TMEM,
    Compiled,
    judged,
    problems_of,
    stale_marks,
)
from xmfu.harness.kernelcheck.sweep import failing, judge
from xmfu.harness.kernelcheck.targets import TARGETS

WGMMA = ("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",)
MMA = ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",)
CLEAN = Facts(WGMMA, 168, 0, 0, 65536, 8, 3, dots=1)
BWD_32 = {"BLOCK_M": 32, "BLOCK_N": 64, "warps": 4, "stages": 2}


def _compiled(facts: Facts | None = CLEAN, target: str = "sm90", dtype: str = "bf16", entry: str = "matmul",
              kernel: str = "_matmul_kernel", params: dict | None = None, error: str | None = None) -> Compiled:
    return Compiled(entry, kernel, params or {"BLOCK_M": 128}, dtype, TARGETS[target], facts, error)


def test_a_clean_compile_has_no_problem():
    assert problems_of(_compiled()) == []


def test_each_problem_is_found():
    assert [c for c, _ in problems_of(_compiled(None, error="PTXASError: boom"))] == [COMPILE]
    assert [c for c, _ in problems_of(_compiled(replace(CLEAN, spill_bytes=8)))] == [SPILLS]
    assert [c for c, _ in problems_of(_compiled(replace(CLEAN, shared_bytes=232449)))] == [SHARED]
    assert problems_of(_compiled(replace(CLEAN, shared_bytes=232448))) == []  # the limit itself fits
    assert [c for c, _ in problems_of(_compiled(replace(CLEAN, shared_bytes=65537), "gfx942"))] == [SHARED, NO_MMA]
    assert [c for c, _ in problems_of(_compiled(replace(CLEAN, tensor_memory_columns=513), "sm100"))] == \
        [TMEM, NO_MMA]


def test_the_matrix_instructions_each_part_is_held_to():
    fallback = replace(CLEAN, instructions=MMA)
    assert [c for c, _ in problems_of(_compiled(fallback))] == [MMA_SYNC]
    assert [c for c, _ in problems_of(_compiled(replace(fallback, instructions=WGMMA + MMA)))] == [MMA_SYNC]
    assert [c for c, _ in problems_of(_compiled(fallback, "sm100"))] == [MMA_SYNC]
    assert problems_of(_compiled(fallback, "sm80")) == []  # mma.sync is sm80's own
    assert [c for c, _ in problems_of(_compiled(replace(CLEAN, instructions=()), "sm80"))] == [NO_MMA]
    assert problems_of(_compiled(fallback, dtype="fp32")) == []  # ieee fp32 has no tensor-core form to miss
    assert problems_of(_compiled(replace(CLEAN, instructions=(), dots=0))) == []  # no tl.dot: nothing to hold
    mfma = replace(CLEAN, instructions=("v_mfma_f32_32x32x8_bf16",))
    assert problems_of(_compiled(mfma, "gfx950")) == []
    _, detail = problems_of(_compiled(fallback))[0]
    assert detail == "mma.sync for 1 dot(s); wgmma expected"


def test_known_and_accepted_cases_are_marked_and_nothing_else():
    fallback = replace(CLEAN, instructions=MMA)
    decode = judged(_compiled(fallback, entry="decode", kernel="_decode_split", params={"BLOCK_N": 64}))
    assert decode[0].mark.startswith("accepted: ")
    # the same fallback where no mark applies: the tiled GEMM (fp8 or bf16) and the backward's 32-row blocks, both
    # pruned on sm90+ now (kernels/fit.py), so a compile of them is a new problem again
    assert judged(_compiled(fallback, dtype="fp8"))[0].mark == ""
    assert judged(_compiled(fallback, entry="attention", kernel="_attn_bwd_dq", params=BWD_32))[0].mark == ""
    assert judged(_compiled(fallback))[0].mark == ""
    spilling = judged(_compiled(replace(fallback, spill_bytes=4), entry="decode", kernel="_decode_split"))
    assert [(p.code, bool(p.mark)) for p in spilling] == [(SPILLS, False), (MMA_SYNC, True)]  # one problem each


def test_a_mark_no_compile_needs_is_stale():
    fallback = replace(CLEAN, instructions=MMA)
    needed = [_compiled(fallback, entry="decode", kernel="_decode_split"), _compiled(fallback, dtype="fp8")]
    assert stale_marks(needed) == []
    assert [m.why[:20] for m in stale_marks(needed[1:])] == ["the split-KV decode "]


def _raw(seq: int, target: str = "sm90", facts: Facts | None = CLEAN, **over) -> dict:
    from dataclasses import asdict

    row = {"seq": seq, "entry": "matmul", "kernel": "_matmul_kernel", "config": "BLOCK_M=128, warps=8",
           "params": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "warps": 8, "stages": 3},
           "config_index": seq, "dtype": "bf16", "target": target, "error": None,
           "facts": asdict(facts) if facts else None, "warnings": [], "seconds": 7.25}
    return {**row, **over}


def _sweep(raws: list[dict]) -> page.Sweep:
    return judge(raws, ("sm90", "gfx942"), ("matmul",), False, None, "3.9.0", 4321.5, 2, findings.MARKS)


def test_rows_come_back_in_launch_order_per_target_and_failing_names_new_problems():
    raws = [_raw(1, facts=replace(CLEAN, spill_bytes=16)), _raw(0, "gfx942", error="boom", facts=None), _raw(0)]
    sweep = _sweep(raws)
    assert [(r.target, r.seq) for r in sweep.rows] == [("sm90", 0), ("sm90", 1), ("gfx942", 0)]
    assert failing(sweep) == [
        "sm90 matmul _matmul_kernel bf16 [BLOCK_M=128, warps=8]: spills registers: 16 bytes per thread (ptxas), "
        "168 registers",
        "gfx942 matmul _matmul_kernel bf16 [BLOCK_M=128, warps=8]: does not compile: boom"]
    assert sweep.target_notes() == {"gfx942": "triton 3.9.0 cannot compile for gfx942: boom"}


def test_the_table_the_json_and_the_page():
    sweep = _sweep([_raw(0), _raw(1, facts=replace(CLEAN, instructions=MMA), dtype="fp8"),
                    _raw(0, "gfx942", facts=replace(CLEAN, instructions=("v_mfma_f32_32x32x8_bf16",),
                                                    compiler_waves=2, registers=120))])
    text = page.table(sweep)
    assert "128x256x64 g8 w8 s3" in text and "mma.sync on sm90+ (NEW)" in text
    # 168 registers x 32 = 5376 a warp: 12 warps of 65536, one 8-warp block
    assert "64/227 KiB" in text and "8/64 warps/SM (registers)" in text and "2/8 waves/SIMD" in text
    data = json.loads(json.dumps(page.to_json(sweep)))
    assert data["rows"][1]["problems"][0]["mark"] == "" and data["rows"][0]["shared_limit"] == 232448
    assert data["rows"][0]["occupancy"] == {"resident": 8, "maximum": 64, "unit": "warps/SM",
                                            "limiter": "registers", "fraction": 0.125}
    again = page.from_json(data)  # a saved sweep judged again
    assert [r.problems for r in again.rows] == [r.problems for r in sweep.rows]
    md = page.markdown(sweep)
    assert "<!-- Generated by `python -m xmfu.harness.kernelcheck.page`; do not edit. -->" in md
    assert "4321" not in md and "7.25" not in md  # no times: the page is the same from one run to the next
    assert page.keys_in(md) == [("matmul", "_matmul_kernel", "sm90", "bf16", "128x256x64 g8 w8 s3"),
                                ("matmul", "_matmul_kernel", "sm90", "fp8", "128x256x64 g8 w8 s3"),
                                ("matmul", "_matmul_kernel", "gfx942", "bf16", "128x256x64 g8 w8 s3")]


def test_short_configs():
    assert page.short_config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 4, "waves_per_eu": 2,
                              "matrix_instr_nonkdim": 16, "kpack": 2, "warps": 8, "stages": 2}) == \
        "256x256x32 g4 wpe2 nk16 kp2 w8 s2"
    assert page.short_config({"BLOCK_N": 64, "warps": 4, "stages": 3}) == "N64 w4 s3"
    assert page.short_config({}) == "defaults"
    assert page.short_config({"warps": 8, "num_ctas": 2}) == "w8 num_ctas=2"


def test_a_page_regenerated_for_some_kernels_keeps_the_others():
    current = "# Kernels\nintro\n## Targets\nold t\n## matmul\nold m\n## stream\nold s\n"
    fresh = "# Kernels\nintro\n## Targets\nnew t\n## stream\nnew s\n"
    assert page.spliced(current, fresh) == "# Kernels\nintro\n## Targets\nnew t\n## matmul\nold m\n## stream\nnew s\n"


def test_a_kernel_that_cannot_be_reached_is_skipped_with_its_reason_not_failed():
    why = "Pallas' Triton lowering is not reachable here: No module named 'jax'"
    sweep = _sweep([_raw(0, entry="pallas_matmul", kernel="xmfu_pallas_matmul", facts=None, skipped=why)])
    assert failing(sweep) == [] and sweep.target_notes() == {}
    assert f"skipped: {why}" in page.table(sweep)
