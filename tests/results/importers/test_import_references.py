"""Imported bundles against public references (issue 42 item 3): `xmfu compare --references` printed an empty table
on imported bundles (they have no manifest `achievable` or `summary.collectives`), and `xmfu table` raised
KeyError 'mode' on an imported nccl-tests bundle. Now each imported log gives its headline figures (its own node),
or says per figure why it has no public reference, and a bundle that gives none says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xmfu.harness.cli.main import main
from xmfu.harness.machine.references import Bands
from xmfu.harness.results.bundle.imported import write
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.suites import yardsticks

LOGS = Path(__file__).parent / "logs"
H100 = "_CudaDeviceProperties(name='NVIDIA H100 80GB HBM3', major=9, minor=0, total_memory=81559MB, " \
       "multi_processor_count=132)"


def _import(tmp_path: Path, tool: str, log: Path) -> Path:
    return write(tool, log, tmp_path, ["xmfu", "import"], "test")


def _figures(*folders: Path) -> list[yardsticks.Yardstick]:
    return yardsticks.of_bundles([load_bundle(f).bundle for f in folders], Bands())


def test_an_imported_rccl_log_is_held_against_the_vendors_bar(tmp_path, capsys):
    """8 MI300X ranks on one host (the log's `Rank` lines): AMD's 304 GB/s all-reduce bar matches (op, ranks,
    nodes); the peak busbw the log printed, 315.91 GB/s in place, is 103.9% of it."""
    folder = _import(tmp_path, "nccl-tests", LOGS / "rccl-tests_mi300x_8ranks.txt")
    assert main(["compare", "--references", "--format", "json", str(folder)]) == 0
    said = {y["figure"]: y for y in json.loads(capsys.readouterr().out)}
    inplace = said["collective rccl-tests/all_reduce/inplace peak busbw (8 ranks)"]
    assert inplace["reference_id"] == "amd-cvs-mi300x-allreduce-8" and inplace["band"] == "within"
    assert inplace["value"] == pytest.approx(315.91, abs=0.01) and inplace["ratio"] == pytest.approx(315.91 / 304, 1e-3)
    assert inplace["node"] == folder.name and inplace["conditions"] == {"op": "all_reduce", "ranks": 8, "nodes": 1}


def test_an_imported_mamf_finder_log_gives_its_achievable_figure(tmp_path):
    """A copy of a real mamf-finder log with an H100's properties line and a median of 765.5 TFLOP/s planted (no
    H100 log of the current format is in tests/results/importers/logs): against the published 794.5 (mamf-finder's
    table), 96.3%, within. The real gfx1151 log's figure has no reference: the part is not in the peak table."""
    text = (LOGS / "mamf-finder_gfx1151_2025.txt").read_text()
    lines = [H100 if line.startswith("_CudaDeviceProperties") else line for line in text.splitlines()]
    planted = "\n".join(lines).replace("hip=6.5.25172-b42a9c664, cuda=None", "cuda=12.6")
    for stat, value in (("mean:   22.3", "mean:   760.1"), ("median: 22.3", "median: 765.5"),
                        ("max:    22.9", "max:    771.0")):
        planted = planted.replace(stat, value)
    log = tmp_path / "mamf-finder_h100_planted.txt"
    log.write_text(planted)
    h100 = _import(tmp_path / "h100", "mamf-finder", log)
    gfx = _import(tmp_path / "gfx", "mamf-finder", LOGS / "mamf-finder_gfx1151_2025.txt")
    (a,), (b,) = _figures(h100), _figures(gfx)
    assert (a.figure, a.reference_id, a.band) == ("achievable matmul bf16 (mamf-finder log)",
                                                  "mamf-nvidia-h100-sxm-bf16", "within")
    assert a.value == pytest.approx(765.5, abs=0.05) and a.ratio == pytest.approx(765.5 / 794.5, 1e-4)
    assert (b.value, b.reference_id) == (pytest.approx(22.3, abs=0.05), None)
    assert b.source == "no public reference (the device is not a peak-table entry)"
    both = _figures(h100, gfx)
    assert [y.node for y in both] == [h100.name, gfx.name]  # each log its own node: logs come from any machine


def test_figures_without_a_reference_say_why_and_a_bundle_without_figures_says_so(tmp_path):
    """16 H100 ranks on 2 hosts: the table holds 8 ranks on 1 node only; the August 2024 GH200 log printed only
    the fastest iteration's rate, which times nothing."""
    nccl = _import(tmp_path / "nccl", "nccl-tests", LOGS / "nccl-tests_h100_16ranks.txt")
    gh200 = _import(tmp_path / "gh200", "mamf-finder", LOGS / "mamf-finder_gh200_2024-08.txt")
    figures = _figures(nccl, gh200)
    busbw = [y for y in figures if y.figure.startswith("collective")]
    assert len(busbw) == 2 and all(y.reference is None for y in busbw)
    assert busbw[0].source == "no public reference for nvidia-h100-sxm, op all_reduce, ranks 16, nodes 2"
    (none,) = [y for y in figures if y.node == gh200.name]
    assert none.value is None and none.figure == "matmul"
    assert none.source.startswith("no public reference: not measured, no row was validly timed (the log prints "
                                  "no median for this shape (only max 821.0 TFLOP/s)")


def test_table_prints_an_imported_nccl_bundle(tmp_path, capsys):
    """Before: KeyError 'mode' (an imported row's parameters are its log's: no mode)."""
    folder = _import(tmp_path, "nccl-tests", LOGS / "rccl-tests_mi300x_8ranks.txt")
    assert main(["table", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "# rccl-tests all_reduce (as the log timed it), ranks: 8" in out
    assert "8589934592  2147483648  float    sum  47617.0  180.40  315.69       0  47584.0  180.52  315.91" in out
