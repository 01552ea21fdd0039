"""The report's distributed-training table: scaling efficiency and exposed communication per strategy, from the
committed CPU reference bundles (torch ddp/fsdp on 2 gloo ranks) and from rows with figures missing."""

from __future__ import annotations

from pathlib import Path

from tests.results.rows import valid_row
from xmfu.harness.results.bundle.reader import read_bundle, typed
from xmfu.harness.results.render import report, scaling_table
from xmfu.harness.results.schema.row import Row

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "cpu-amd-epyc-2core"
TORCH_TINY = REFERENCE / "20261123T222637Z-transformer-fp32-97b8cd"


def _strategy_row(**fields) -> Row:
    """A distributed training step (fsdp on 2 ranks) as the table reads it, with `fields` set."""
    return typed(valid_row(**{"workload": "transformer", "params": {"parallel": "fsdp", "world_size": 2}, **fields}))


def test_each_strategy_row_shows_its_scaling_efficiency_and_exposed_communication():
    bundle = read_bundle(TORCH_TINY)
    picked = scaling_table.distributed_rows(bundle.rows)
    assert [r.params["parallel"] for r in picked] == ["ddp", "fsdp"]  # the `none` baseline is not a strategy row
    html = scaling_table.scaling_table(bundle.rows)
    for r in picked:
        row = dict(zip(scaling_table.HEAD, scaling_table.cells(r), strict=True))
        assert row["scaling efficiency"] == f"{100 * r.scaling_efficiency:.1f}%"
        assert row["comm exposed ms"] == f"{r.comm_exposed_s * 1e3:.4g}"
        assert row["comm alone ms"] == f"{r.comm_total_s * 1e3:.4g}"
        assert row["devices"] == "2"
        assert row["how exposed was measured / reason"] in html.replace("&#x27;", "'")
        if r.comm.clamped:  # a clamped overlap says so, with what was measured
            assert "clamped" in row["overlap"]


def test_a_scaling_efficiency_above_one_is_marked_not_credible_with_its_note():
    r = _strategy_row(scaling_efficiency=16.7, scaling_credible=False, comm={},
                      scaling_note="not credible: scaling efficiency 16.7 > 1")
    row = dict(zip(scaling_table.HEAD, scaling_table.cells(r), strict=True))
    assert row["scaling efficiency"] == "1670.0% (not credible: above 100%)"
    assert row["how exposed was measured / reason"].startswith("not credible: scaling efficiency 16.7 > 1")
    old = _strategy_row(scaling_efficiency=16.7, comm={})  # a bundle from before the flag
    assert "not credible" in dict(zip(scaling_table.HEAD, scaling_table.cells(old), strict=True))["scaling efficiency"]


def test_missing_figures_stay_blank_and_a_failed_row_gives_its_reason():
    failed = _strategy_row(status="failed", reason="rank 1 never joined <in time>", time_s=None, tflops=None,
                           mfu=None, timing_valid=False)
    row = dict(zip(scaling_table.HEAD, scaling_table.cells(failed), strict=True))
    assert row["scaling efficiency"] == row["overlap"] == row["comm exposed ms"] == ""
    html = scaling_table.scaling_table([failed])
    assert "rank 1 never joined &lt;in time&gt;" in html and "class=bad" in html


def test_the_report_has_the_section_and_says_when_no_row_is_distributed():
    bundle = read_bundle(TORCH_TINY)
    page = report.build([bundle], [{}], {})
    assert "scaling efficiency and exposed communication per strategy" in page
    assert "ddp" in page and "fsdp" in page
    baseline = bundle.raw_rows[0]
    assert "No distributed training rows" in scaling_table.scaling_table(
        [typed({**baseline, "params": {**baseline["params"], "parallel": "none"}})])


def test_a_distributed_row_shows_its_flags():
    """The scaling table shows a row's quality flags beside its figures (issue 30, item 7)."""
    row = typed(valid_row(peak=100.0, workload="transformer", params={"parallel": "ddp", "name": "tiny"},
                          contention={"contended": True, "reason": "load"}))
    cells = dict(zip(scaling_table.HEAD, scaling_table.cells(row), strict=True))
    assert cells["flags"] == "contended"
