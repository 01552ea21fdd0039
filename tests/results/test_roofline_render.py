"""The roofline in what is read: the end table's GB/s and SOL columns, the suite verdict judging memory-bound rows on
bandwidth, and the report's measured roofs (mamf's, membw's) beside the datasheet ones."""

from __future__ import annotations

from types import SimpleNamespace

from tests.results.rows import matmul_row
from xmfu.harness.machine.peaks import BandwidthPeak, Peak
from xmfu.harness.machine.roofline import Roofs, Work, place
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.plots import roofline
from xmfu.harness.results.render.table import table
from xmfu.harness.suites import verdict

ROOFS = Roofs(Peak(100.0, "s", "x", ""), BandwidthPeak(1000.0, "s", "x", ""), 2**20)  # ridge 100 FLOPs per byte


def _row(m: int, backend: str = "torch"):
    row = matmul_row(m, m, m, backend)
    row["bytes"] = 3.0 * m * m * 2
    row["bandwidth_gbps"] = row["bytes"] / row["time_s"]["median"] / 1e9
    row["roofline"] = place(Work(row["flops"], row["bytes"]), ROOFS, row["time_s"]["median"])
    return typed(row)


def test_the_table_shows_each_rows_share_of_the_roofline_and_a_memory_bound_rows_bandwidth():
    small, large = _row(64), _row(4096)  # intensity 21 and 1365 against the ridge at 100
    assert small.roofline.bound == "memory" and large.roofline.bound == "compute"
    text = table([small, large], wide=True)
    assert "SOL" in text.splitlines()[0] and " mem" in text and " cmp" in text
    sol = f"{100 * large.roofline.sol_fraction:.1f}% cmp"  # 50 of the 100 TFLOP/s roof
    assert sol == "50.0% cmp" and sol in text
    assert f"{small.bandwidth_gbps:.4g}" in text and f"{large.bandwidth_gbps:.4g}" not in text


def test_the_verdict_judges_a_small_matmul_on_bandwidth_not_flops():
    small, large = _row(64), _row(4096, "jax")
    bundle = SimpleNamespace(rows=[small, large], manifest={})
    m = verdict.matmul([bundle])
    assert [b["backend"] for b in m["backends"]] == ["jax"] and m["best"]["of_roofline"] == 0.5
    (bw,) = verdict.memory_bound([small, large])
    assert (bw["backend"], bw["of_memory_roof"]) == ("torch", small.roofline.sol_fraction)


def test_the_report_draws_the_measured_roofs_beside_the_datasheet_ones():
    rows = [_row(64), _row(4096)]
    bundle = SimpleNamespace(rows=rows, manifest={
        "achievable": {"tflops": 60.0, "source": "mamf sweep in this run", "dtype": "bf16"},
        "summary": {"membw": {"achievable_gbps": 800.0, "kernel": "triad", "device": "GPU A"}}})
    measured = roofline.measured_roofs([bundle])
    assert [(m.kind, m.value) for m in measured] == [("compute", 60.0), ("memory", 0.8)]
    html = roofline.roofline(rows, measured)
    assert "measured memory roof (membw triad): 800 GB/s on GPU A" in html and "<svg" in html
