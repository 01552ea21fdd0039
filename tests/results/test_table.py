"""The table printed at the end of a run: 120 columns by default, every column with wide=True."""

from __future__ import annotations

import pytest

from tests.results.rows import attention_row, collectives_row, matmul_row, valid_row
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.render.table import FIGURES, IDENTITY, table
from xmfu.harness.results.render.text_table import wrap_cell
from xmfu.harness.results.schema.row import Row

CONTENDED = {"contended": True, "reason": "python (pid 7) used 52% of a core", "busiest_others": [], "load_avg": []}
SKIPPED = "SDPA cudnn kernel is not available for this case on cpu: " + "x " * 60
INVALID = "Triton interpreter on a CPU: the result is checked, its time says nothing about hardware"


def _row(**kw) -> Row:
    """A timed matmul row whose median's 95% CI is +-825% wide, with `kw` set."""
    row = valid_row(phase="main", dtype="bf16", case_id="matmul-bf16-64", peak=2.0, **kw)
    return typed({**row, "time_s": {**row["time_s"], "median": 1e-3, "ci95_low": 0.5e-3, "ci95_high": 17e-3}})


def _speedup(value: float, verdict: str) -> dict:
    return {"baseline": "torch_sdpa", "value": value, "ci95_low": value * 0.9, "ci95_high": value * 1.1,
            "rounds": 20, "verdict": verdict, "variance_source": "interleaved rounds of one run"}


def _inference(phase: str, backend: str, **kw) -> dict:
    latency = {"p50": 2.5e-3, "p90": 3e-3, "p99": 4e-3, "mean": 2.6e-3, "n": 100}
    shape = "prefill-b4-p512" if phase == "prefill" else "decode-b4-p512-g128"
    figures = ({"ttft_s": latency, "throughput": {"prompt_tokens_per_s": 819200.0}} if phase == "prefill" else
               {"tpot_s": {**latency, "generations": 2.0}, "mbu": 0.61, "peak_membw_gbps": 3350.0,
                "throughput": {"generated_tokens_per_s": 1600.0, "generated_tokens_per_sequence_per_s": 400.0}})
    return valid_row([2.4e-3, 2.5e-3, 2.6e-3], workload="inference", backend=backend, dtype="bf16", phase="main",
                     case_id=f"inference-bf16-125m-{shape}", params={"phase": phase}, **{**figures, **kw})


def _steady(reached: bool) -> dict:
    window = {"index": 3, "start_s": 30.0, "median_s": 1.1e-3, "n": 900, "tflops": 181.5, "mean_sm_clock_mhz": 1755.0,
              "mean_power_w": 690.0}
    first = {**window, "index": 0, "start_s": 0.0, "median_s": 1e-3, "tflops": 199.6}
    return {"window_s": 10.0, "tolerance": 0.02, "windows": [first, window], "reached_after_s": 30.0,
            "reached": reached, "first_window": first, "steady_window": window, "first_vs_steady_time_change": -0.09}


def _representative() -> list[Row]:
    """A run of each workload as the engine writes them: a mamf sweep before the main rows, attention with a
    baseline and skipped/interpreted backends, a distributed training step, inference prefill and decode, a
    sustained run, and collectives in and out of place; as the table reads them (records)."""
    rows = [matmul_row(m, m, m, phase="mamf") for m in (1024, 2048, 4096, 8192)]
    rows += [matmul_row(4096, 4096, 4096, backend=b, phase="main", mfu_vs_achievable=0.93, contention=CONTENDED)
             for b in ("torch", "jax")]
    for mode in ("fwd", "fwd_bwd"):
        for causal in (False, True):
            rows += [attention_row(4096, causal, mode, phase="main"),
                     attention_row(4096, causal, mode, backend="torch_sdpa_flash", phase="main",
                                   speedup=_speedup(1.07, "inconclusive"), contention=CONTENDED,
                                   timer={"name": "cuda_event", "inner": 1, "stop": "max_samples=500 reached",
                                          "ci_target_met": False, "launch_bound": True}),
                     attention_row(4096, causal, mode, backend="triton", phase="main", timing_valid=False,
                                   tflops=None, mfu=None, timing_note=INVALID, contention=CONTENDED),
                     attention_row(4096, causal, mode, backend="torch_sdpa_cudnn", phase="main", status="skipped",
                                   time_s=None, tflops=None, mfu=None, reason=SKIPPED)]
    rows += [valid_row(workload="transformer", backend=b, dtype="bf16", phase="main",
                       case_id=f"transformer-bf16-1b-b8-s2048-{par}-weak", params={"parallel": par},
                       throughput={"tokens_per_s": 51234.5}, scaling_efficiency=0.93)
             for b in ("torch", "torch_compile", "jax") for par in ("ddp", "fsdp")]
    rows += [_inference(p, b) for p in ("prefill", "decode") for b in ("torch", "torch_compile", "jax")]
    rows += [valid_row(workload="matmul", backend="torch", dtype="bf16", phase="sustained",
                       case_id="matmul-bf16-8192x8192x8192-NN", params={"m": 8192}, steady_state=_steady(r))
             for r in (True, False)]
    for size in (1024, 1 << 20, 1 << 26):
        out_of_place = collectives_row(size, ranks=8, contention=CONTENDED)
        rows += [collectives_row(size, ranks=8), {**out_of_place, "params": {**out_of_place["params"],
                                                                             "in_place": False}}]
    return [typed(r) for r in rows]


def test_the_default_table_fits_120_columns_and_shows_every_figure():
    rows = _representative()
    out = table(rows)
    widest = max(out.splitlines(), key=len)
    assert len(widest) <= 120, widest
    for text in ("TTFT ms", "TPOT ms", "tok/s", "MBU", "61.0%", "1600", "8.192e+05",  # inference's figures
                 "steady TFLOP/s", "181.5 from 30s", "not reached (last 181.5)",  # timing=sustained
                 "contended,", "CI missed,", "launch-bound", "timing not valid",  # the rows' quality flags
                 "1.07x [0.96,1.18]", "inconclusive", "busbw", "#wrong", "out-of-place", "in-place"):
        assert text in out, text
    # what every row of a section shares is said once above it, and each long note once, whole, below it
    assert "# same in every row: phase main, workload attention, dtype bf16" in out
    assert " ".join(SKIPPED.split()) in " ".join(out.split())


def test_wide_shows_every_column_on_one_line_per_row():
    rows = _representative()
    out = table(rows, wide=True)
    header = next(line for line in out.splitlines() if line.startswith("phase"))
    for name, *_ in [*IDENTITY, *FIGURES, ("note",)]:
        assert name in header, name
    computed = [r for r in rows if r.workload != "collectives"]
    data = [line for line in out.splitlines() if line.startswith(("main", "mamf", "sustained"))]
    assert len(data) == len(computed)  # no row wraps onto a second line
    assert max(len(line) for line in out.splitlines()) > 120
    assert "contended,CI missed,launch-bound" in out


def test_a_row_that_missed_its_ci_target_is_flagged():
    missed = _row(timer={"ci_target_met": False, "stop": "time budget max_time_s=10 reached before the CI target"})
    out = table([missed])
    assert "CI missed" in out and "825.0%!" in out and "CI target missed: time budget" in out
    fine = table([_row(timer={"ci_target_met": True, "stop": "95% CI"})])
    assert "CI missed" not in fine and "!" not in fine


@pytest.mark.parametrize("text,width,sep,expected", [
    ("fwd_bwd-causal-top_left", 16, "-", ["fwd_bwd-causal-", "top_left"]),
    ("contended,CI missed,launch-bound", 20, ",", ["contended,CI missed,", "launch-bound"]),
    ("averyveryverylongpart-x", 5, "-", ["averyveryverylongpart-", "x"]),  # a part longer than the width: whole
])
def test_cells_wrap_between_their_parts_never_inside_one(text, width, sep, expected):
    assert wrap_cell(text, width, sep) == expected


def test_xmfu_table_reprints_a_bundle_narrow_or_wide(tmp_path, capsys):
    from tests.results.rows import write_bundle
    from xmfu.harness.cli.main import main

    rows = [attention_row(4096, True, "fwd", backend=b, phase="main", contention=CONTENDED)
            for b in ("torch_sdpa", "torch_sdpa_flash", "jax")]
    bundle = write_bundle(tmp_path, "r1", rows)
    assert main(["table", str(bundle.folder)]) == 0
    narrow = capsys.readouterr().out
    assert "contended" in narrow and max(len(line) for line in narrow.splitlines()) <= 120
    assert main(["table", "--wide", str(bundle.folder)]) == 0
    assert "steady TFLOP/s" in capsys.readouterr().out  # every column, the empty ones too
    assert main(["table", str(tmp_path / "nothing")]) == 2


def test_output_wide_is_a_declared_setting():
    from xmfu.harness.config.run_settings import parse_run_config
    from xmfu.harness.engine.declare import ConfigError

    backends = {"matmul": ["torch"]}
    assert parse_run_config({"workload": {"name": "matmul"}}, backends).output.wide is False
    assert parse_run_config({"workload": {"name": "matmul"}, "output": {"wide": True}}, backends).output.wide
    with pytest.raises(ConfigError, match=r"output\.wide"):
        parse_run_config({"workload": {"name": "matmul"}, "output": {"wide": "maybe"}}, backends)


def test_a_shape_that_would_wrap_becomes_a_heading_above_its_rows():
    """An attention smoke table printed `fwd_bwd-causal-top_left` over three lines beside the speedup and flags
    columns (issue 42 item 12): such a shape is a heading line above its rows now, the table still 120 columns."""
    rows = []
    for mode, mask in (("fwd", "full"), ("fwd_bwd", "causal-top_left")):
        case_id = f"attention-bf16-{mode}-{mask}"
        rows += [{**attention_row(48, True, mode, phase="main"), "case_id": case_id},
                 {**attention_row(48, True, mode, backend="torch_sdpa_efficient_long_name", phase="main",
                                  contention=CONTENDED, speedup=_speedup(0.82, "inconclusive"), timing_valid=False,
                                  timing_note=INVALID), "case_id": case_id}]
    out = table([typed(r) for r in rows]).splitlines()
    assert max(len(line) for line in out) <= 120
    headings = [line for line in out if line.startswith("shape ")]
    assert headings == ["shape fwd-full", "shape fwd_bwd-causal-top_left"]
    assert not any(line.strip() in ("causal-", "top_left", "full") for line in out)  # no shape split over lines
    assert out[out.index(headings[1]) + 1].startswith("torch_sdpa ")  # the heading's rows follow it


def test_the_end_table_shows_each_rows_energy_source_and_its_j_per_token_where_it_has_one():
    """Issue 39, "Done when": every row says where its energy came from, and J/token shows where there is one."""
    counter = {"source": "counter", "scope": "device", "mean_power_w": 610.0, "tflops_per_w": 0.05,
               "j_per_token": {"generated_tokens": 0.1185}, "tokens_per_s_per_w": {"generated_tokens": 8.44}}
    decode = {"name": "8b", "phase": "decode", "batch": 64}
    rows = [typed(valid_row(workload="inference", backend="torch", params=decode, energy=counter,
                            throughput={"generated_tokens_per_s": 5147.0})),
            typed(valid_row(workload="inference", backend="jax", params=decode,
                            throughput={"generated_tokens_per_s": 5000.0},
                            energy={"source": "not measured", "scope": "device", "reason": "no NVML"}))]
    lines = table(rows).splitlines()
    header = lines[1].split()
    assert header[:2] == ["backend", "energy"] and "J/tok" in header and "W" in header
    torch_line, jax_line = lines[3], lines[4]
    assert torch_line.startswith("torch    counter (device)") and "0.1185" in torch_line and " 610 " in torch_line
    assert jax_line.startswith("jax      not measured") and "energy not measured: no NVML" in lines
    assert "J/tok" not in table([typed(valid_row())])  # no row with energy: no energy columns


def test_one_energy_source_for_every_row_that_has_one_is_said_once_in_the_header():
    """A skipped row has no energy section; the rows that have one share it (one device): said once, not per row
    (each row's six-line reason wrapped in its column, seen on a CPU run with an fp8 row skipped)."""
    alone = {"source": "not measured", "scope": "cpu package", "reason": "no readable RAPL package: " + "x " * 40}
    rows = [typed(valid_row(backend=b, energy=alone)) for b in ("torch", "jax")]
    rows.append(typed(valid_row(backend="jax", case_id="other", status="skipped", reason="not here")))
    text = table(rows)
    flat = " ".join(text.replace("\n#   ", " ").split())  # the header's wrapped lines joined
    assert text.startswith("# same in every row:") and flat.count("no readable RAPL") == 1
    assert "energy not measured (cpu package)" in flat and "energy not measured: no readable RAPL" in flat
