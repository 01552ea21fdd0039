"""`xmfu history report`: software changes between consecutive runs, changes beyond the noise marked, the gap,
coverage over time (the day each cell turned ok), the stack versions in the store, and the page in Chromium."""

from __future__ import annotations

import re
from datetime import date

import pytest
from msgspec.structs import replace

from tests.results.test_report import ink, render
from xmfu.harness.results.history import coverage_history, judge, parquet
from xmfu.harness.results.history.stored import Stored
from xmfu.harness.results.render import history_report

pytest.importorskip("pyarrow", exc_type=ImportError)  # pyarrow 2x on numpy 1.x raises ImportError
HOSTILE = "<img src=x onerror=alert(1)>"
STACK = {"cuda": {"torch": "2.12.0", "cuda": "12.8", "hip": "", "nccl": "2.26.2", "driver": "570.86"},
         "rocm": {"torch": "2.12.0", "cuda": "", "hip": "6.4.1", "nccl": "2.22.3", "driver": "6.12.12"}}


def _row(night, platform, device, tflops, **fields):
    """One stored row of `platform`'s run of this night, as `parquet.load` gives it."""
    row = {"run_id": f"{platform}{night}", "created": parquet.when(f"2026-11-{night + 1:02d}T02:00:00Z"),
           "workload": "matmul", "case_id": "matmul-bf16-8192x8192x8192-NN", "backend": "torch", "device": device,
           "platform": platform, "dtype": "bf16", "status": "ok", "timing_valid": True, "comparability_key": "k",
           "tflops": tflops, "variant": "", "jax": "", "jaxlib": "", "triton": "", "xmfu_version": "0.1.0",
           **STACK[platform]}
    return Stored(**{**row, **fields})


def _nights(n=10):
    """CUDA steady at 700 until its driver changes on night 7 (a regression to 640); ROCm at 500 until torch
    changes on night 5 (560 after); ROCm's Triton attention fails until night 4, ok on CUDA from night 0."""
    rows = []
    for night in range(n):
        cuda_driver = "575.51" if night >= 7 else "570.86"
        rocm_torch = "2.13.0" if night >= 5 else "2.12.0"
        rows.append(_row(night, "cuda", "NVIDIA H100", (640.0 if night >= 7 else 700.0) + night % 2,
                         driver=cuda_driver))
        rows.append(_row(night, "rocm", "AMD MI300X", (560.0 if night >= 5 else 500.0) + night % 2, torch=rocm_torch))
        for platform, device in (("cuda", "NVIDIA H100"), ("rocm", "AMD MI300X")):
            broken = platform == "rocm" and night < 4
            rows.append(_row(night, platform, device, None if broken else 300.0, workload="attention",
                             backend="triton", case_id=f"attention-{HOSTILE}", variant="causal fwd",
                             status="failed" if broken else "ok",
                             driver="575.51" if platform == "cuda" and night >= 7 else STACK[platform]["driver"],
                             torch="2.13.0" if platform == "rocm" and night >= 5 else "2.12.0"))
    return rows


def test_software_changes_are_listed_where_they_happened():
    changes = history_report.software_changes(_nights())
    assert [(c.label, c.platform, c.at.day, c.text()) for c in changes] == [
        ("S1", "rocm", 6, "torch 2.12.0 → 2.13.0"), ("S2", "cuda", 8, "driver 570.86 → 575.51")]
    older = [replace(r, cuda="" if r.run_id.endswith("0") else r.cuda) for r in _nights(3)]
    assert len(history_report.software_changes(older)) == 0  # unknown on one side (an older store) is no change


def test_steps_beyond_the_noise_over_the_whole_history():
    steps = judge.steps(_nights(), "tflops")
    found = [(s["device"], s["at"].day, s["worse"]) for s in steps]
    assert found == [("NVIDIA H100", 8, True), ("AMD MI300X", 6, False)]  # one mark per step, where it began
    assert all(s["previous_at"] < s["at"] for s in steps)


def test_coverage_over_time_and_the_day_each_cell_turned_ok():
    days = coverage_history.by_day(_nights())
    shares = coverage_history.shares(days)
    assert [v for _, v in shares[("rocm", "AMD MI300X")]][:5] == [0.5, 0.5, 0.5, 0.5, 1.0]
    assert all(v == 1.0 for _, v in shares[("cuda", "NVIDIA H100")])
    cells = {(c.entry[1], c.column[0]): c for c in coverage_history.cells(days)}
    rocm = cells[("triton", "rocm")]
    assert rocm.turned_ok == date(2026, 11, 5) and rocm.first_run == date(2026, 11, 1)
    assert rocm.first_ok_elsewhere == date(2026, 11, 1) and rocm.lag_days == 4 and not rocm.ok_from_first_run
    assert cells[("triton", "cuda")].ok_from_first_run and cells[("triton", "cuda")].lag_days is None
    assert next(iter(coverage_history.cells(days))).entry[1] == "triton"  # the latest to turn ok comes first


def test_a_cell_lost_since_the_night_before_is_named():
    rows = _nights(3)
    tonight = [_row(3, "rocm", "AMD MI300X", None, workload="attention", backend="triton", variant="causal fwd",
                    case_id="a", status="incorrect")]
    assert coverage_history.lost(rows + tonight, ["rocm3"]) == []  # it was failing before too
    rows = [r for r in _nights(6) if r.platform == "cuda"]
    tonight = [_row(6, "cuda", "NVIDIA H100", None, workload="attention", backend="triton", variant="causal fwd",
                    case_id="a", status="incorrect")]
    (lost,) = coverage_history.lost(rows + tonight, ["cuda6"])
    assert "attention triton bf16 causal fwd on cuda NVIDIA H100: ok before, incorrect now" in lost


def test_the_store_keeps_the_stack_versions(tmp_path):
    from tests.results.rows import attention_row, write_bundle

    env = {"packages": {"torch": "2.13.0", "jax": "0.10.2", "jaxlib": "0.10.2", "triton": "3.9.0"},
           "torch": {"cuda": "12.8", "hip": None}, "nccl": {"version": "2.26.2"}, "driver": "570.86",
           "host": {"hostname": "node-1"}}
    bundle = write_bundle(tmp_path, "r1", [attention_row(128, True, "fwd")], environment=env)
    parquet.add(tmp_path / "store", bundle, bundle.environment())
    (row,) = parquet.load(tmp_path / "store")
    names = ("cuda", "hip", "nccl", "torch", "jaxlib", "triton", "driver", "host", "variant")
    assert {k: getattr(row, k) for k in names} == {
        "cuda": "12.8", "hip": "", "nccl": "2.26.2", "torch": "2.13.0", "jaxlib": "0.10.2", "triton": "3.9.0",
        "driver": "570.86", "host": "node-1", "variant": "causal fwd"}


def test_the_page_renders_in_headless_chromium(tmp_path):
    html = history_report.build(_nights(), f"/store/{HOSTILE}")
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    texts = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", html))
    assert "S1" in texts and "S2" in texts  # the software changes drawn where they happened
    page = tmp_path / "history.html"
    page.write_text(html)
    shot, dom, stderr = render(page, tmp_path, size=(1200, 2400))
    share, saturated = ink(shot)
    assert share > 0.03 and saturated > 2000 and "CONSOLE" not in stderr
    for needle in ("regression", "improvement", "driver 570.86 → 575.51", "TFLOP/s ratio rocm / cuda",
                   "2026-11-05", "Each cell: when it first ran and when it turned ok"):
        assert needle in dom, needle
    assert "<img" not in dom.split("<body", 1)[1]


def test_cli_history_report(tmp_path, capsys):
    from tests.results.test_history import _mixed_store
    from xmfu.harness.cli.main import main

    store = _mixed_store(tmp_path)
    assert main(["history", "report", "--store", str(store), "-o", str(tmp_path / "h.html")]) == 0
    assert "3 runs" in capsys.readouterr().out and (tmp_path / "h.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["history", "report", "--store", str(store), "-o", str(tmp_path / "h.svg")]) == 2
    assert main(["history", "report", "--store", str(store), "--window", "0"]) == 2
    assert "--window" in capsys.readouterr().err


def test_the_gap_is_one_line_per_case_on_one_axes_per_workload():
    from xmfu.harness.results.history import trend

    groups = trend.gap_groups(judge.gap(_nights(), "tflops", "rocm", "cuda"))
    assert sorted(groups) == ["attention", "matmul"]
    (line,) = groups["matmul"].values()
    assert line[0][1] == pytest.approx(500 / 700) and line[-1][1] == pytest.approx(561 / 641) and len(line) == 10
    assert [d.day for d, _ in next(iter(groups["attention"].values()))] == [5, 6, 7, 8, 9, 10]


def test_a_suites_part_bundles_count_as_one_run():
    """A nightly suite writes a bundle per part; `history report` counted each as a run (issue 42 item 12)."""
    rows = []
    for night in range(3):
        for part in ("matmul", "attention", "collectives"):
            rows.append(_row(night, "cuda", "NVIDIA H100", 700.0, run_id=f"nightly{night}-host0-{part}",
                             suite_id=f"nightly{night}", case_id=f"{part}-case"))
    rows.append(_row(9, "cuda", "NVIDIA H100", 700.0, run_id="alone"))  # a run outside a suite ('' suite_id)
    page = history_report.build(rows, "store")
    assert "<p>4 runs (10 bundles: a suite's parts are one run) from 2026-11-01" in page
    older = [replace(r, suite_id=None) for r in rows]  # a store written before suite_id was kept
    assert "<p>10 runs from" in history_report.build(older, "store")


def test_flatten_keeps_the_suite_run_id(tmp_path):
    from tests.results.rows import matmul_row, write_bundle

    bundle = write_bundle(tmp_path, "s1-host0-matmul", [matmul_row(64, 64, 64)])
    bundle.manifest["suite"] = {"name": "nightly", "version": 1, "definition_sha": "abc", "suite_id": "s1",
                                "part": "matmul", "host": "host0"}
    assert {r.suite_id for r in parquet.flatten(bundle, {})} == {"s1"}
