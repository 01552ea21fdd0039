"""The node count a bundle records (manifest process.nodes, issue 28): counted from the hosts a multi-process run's
ranks exchanged, checked by the validator against the run's world size and rank maps, and used to match a loose
bundle's multi-device figures with public references matched on nodes."""

from __future__ import annotations

import pytest

from tests.results.rows import valid_row
from tests.results.test_verdict import FLOPS, _bundle
from xmfu.harness.machine.references import Bands
from xmfu.harness.results.bundle import nodes
from xmfu.harness.results.bundle.reader import typed
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.bundle.writer import RecordError
from xmfu.harness.suites import yardsticks

H100 = {"peak_entry": "nvidia-h100-sxm", "platform": "cuda", "device": "NVIDIA H100 80GB HBM3"}


def _rank_map(*hosts: str) -> list[list]:
    return [[h, i % 8, f"cuda:{i % 8}"] for i, h in enumerate(hosts)]


def _coll(ranks: int, hosts: list[str]) -> dict:
    return valid_row(flops=FLOPS, peak=None, workload="collectives", backend="torch_dist", dtype="bf16",
                     case_id="collectives-all_reduce-1G", ranks=ranks, params={"op": "all_reduce"},
                     notes={"rank_map": _rank_map(*hosts)}, **H100)


def _process(world: int, n: int | None) -> dict:
    return {"rank": 0, "world_size": world, "local_rank": 0, "launcher": "torchrun", "nodes": n}


def test_the_count_is_the_distinct_hosts_of_the_rank_maps_and_one_for_a_single_process():
    one, two = _coll(8, ["a"] * 8), _coll(16, ["a"] * 8 + ["b"] * 8)
    assert nodes.of_run(1, []) == 1 and nodes.of_run(8, []) is None  # no rank exchanged its host: not measured
    assert nodes.of_run(8, [one]) == 1 and nodes.of_run(16, [two, two]) == 2
    assert nodes.of_row(typed(two)) == 2 and nodes.of_row(typed(valid_row(params={"world_size": 1}))) == 1
    assert nodes.of_row(typed(valid_row(params={"world_size": 8}, notes={}))) is None


def test_the_validator_checks_the_count_against_world_size_and_the_rank_maps(tmp_path):
    row = _coll(8, ["a"] * 8)
    assert not load_bundle(tmp_path / _bundle(tmp_path, "ok", [row], process=_process(8, 1)).split("/", 1)[1]
                           ).problems
    for run_id, process, said in (
            ("more", _process(8, 9), "process.nodes 9 is more than the run's world_size 8"),
            ("maps", _process(8, 2), "process.nodes 2 is not what the run says: its rows' rank maps name 1"),
            ("single", _process(1, 2), "process.nodes 2 is more than the run's world_size 1")):
        with pytest.raises(AssertionError):  # _bundle asserts the bundle it wrote loads clean
            _bundle(tmp_path, run_id, [row], process=process)
        problems = load_bundle(tmp_path / run_id).problems
        assert any(said in p for p in problems), problems
    with pytest.raises(RecordError, match=r"Expected `int` >= 1 - at `\$.process.nodes`"):  # the schema's floor
        _bundle(tmp_path, "zero", [row], process=_process(8, 0))


def _loose(tmp_path, n: int | None) -> list:
    summary = {"collectives": {"torch_dist/all_reduce/inplace/throughput": {
        "ranks": 8, "peak_busbw_gbps": 470.0, "peak_at_bytes": 2**33, "link_gbps": 450, "peak_busbw_of_link": 1.04}}}
    rows = [_coll(8, ["a"] * 8)] if n else [{**_coll(8, ["a"] * 8), "notes": {}}]
    run_id = f"coll-{n}"
    _bundle(tmp_path, run_id, rows, summary=summary, process=_process(8, n))
    return [load_bundle(tmp_path / run_id).bundle]


def test_a_loose_bundles_collective_is_matched_with_the_nodes_it_records(tmp_path):
    (r,) = [x for x in yardsticks.of_bundles(_loose(tmp_path, 1), Bands()) if x.figure.startswith("collective")]
    assert r.reference_id == "nccl-tests-212-h100-sxm-allreduce-8" and r.conditions["nodes"] == 1
    assert r.ratio == pytest.approx(470 / 480) and r.band == "within"
    # a bundle that does not record its nodes (not measured) is still not compared
    (r,) = [x for x in yardsticks.of_bundles(_loose(tmp_path, None), Bands()) if x.figure.startswith("collect")]
    assert r.reference_id is None and r.source == "no public reference (the figure does not record nodes)"


def test_a_loose_bundles_training_figure_takes_its_nodes_from_its_rank_map(tmp_path):
    median = FLOPS / 400e12
    train = valid_row([median] * 3, flops=FLOPS, peak=989.0, workload="transformer", backend="torch", dtype="fp8",
                      case_id="transformer-fp8-8b-s8192", ranks=8, throughput={"tokens_per_s": 14000.0},
                      params={"name": "8b", "seq_len": 8192, "world_size": 8},
                      notes={"rank_map": _rank_map(*["a"] * 8)}, **H100)
    _bundle(tmp_path, "train", [train], process=_process(8, 1))
    (r,) = [x for x in yardsticks.of_bundles([load_bundle(tmp_path / "train").bundle], Bands())
            if x.figure.startswith("training") and x.figure.endswith("tokens/s per device")]
    assert r.reference_id == "megatron-bridge-25.11-dgx-h100-llama3-8b-fp8cs"
    assert r.ratio == pytest.approx(14000 / 14451)
