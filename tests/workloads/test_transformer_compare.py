"""`xmfu compare` on distributed rows: the strategy, world size and scaling are case params, so the comparability
key differs whenever one of them does and compare refuses the pair (naming the field) unless allowed; a
strategy is also in the case id (one run sweeps strategies, and rows match on case id and backend), so rows of
different strategies never pair up at all."""

from __future__ import annotations

import yaml

from tests.results.rows import valid_row
from xmfu.harness.config.hydra_app import CONFIG_DIR
from xmfu.harness.results.analysis.compare import Side, compare
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.writer import BundleWriter
from xmfu.harness.results.schema.comparability import comparability_fields, comparability_key
from xmfu.workloads.transformer.cases import expand

MODEL = yaml.safe_load((CONFIG_DIR / "model" / "tiny.yaml").read_text())
PROTOCOL = {"protocol": "xmfu.timing/1", "statistic": "median", "cold_cache": False, "sustained": False}


def _case(parallel: str, n: int, scaling: str = "weak"):
    cases = expand({"name": "transformer", "model": MODEL, "parallel": parallel, "scaling": scaling}, "bf16", 0)
    return cases[-1].on_devices(n)


def _bundle(tmp_path, name, case):
    fields = comparability_fields(case.workload, case.params(), case.dtype, case.flop_convention, PROTOCOL)
    writer = BundleWriter(tmp_path / name, {"run_id": name, "created": "now", "xmfu_version": "0", "git_sha": None,
                                            "argv": [], "overrides": [], "comparability_key": "k"}, "", {})
    row = valid_row([0.01, 0.011, 0.0105], flops=case.flops(), run_id=name, case_id=case.case_id,
                    workload="transformer", dtype="bf16", params=case.params(),
                    comparability_key=comparability_key(fields), comparability=fields)
    writer.append(row, {"case_id": case.case_id, "backend": "torch", "samples": [0.01, 0.011, 0.0105],
                        "repeats": [0, 0, 0]})
    writer.finalize("complete")
    return Side([read_bundle(tmp_path / name)])


def test_world_size_or_scaling_differs_compare_refuses_unless_allowed(tmp_path):
    eight, sixteen = _bundle(tmp_path, "a", _case("ddp", 8)), _bundle(tmp_path, "b", _case("ddp", 16))
    result = compare([eight, sixteen])
    assert not result.rows and result.refused[0]["differs"] == ["params.global_batch: 16 vs 32",
                                                                "params.world_size: 8 vs 16"]
    assert compare([eight, sixteen], allow_incomparable=True).rows[0]["incomparable"]
    strong = _bundle(tmp_path, "c", _case("ddp", 8, "strong"))
    assert not compare([eight, strong]).rows  # ddp-weak and ddp-strong: different case ids, never paired


def test_rows_of_different_strategies_are_never_compared(tmp_path):
    ddp, fsdp = _case("ddp", 8), _case("fsdp", 8)
    assert comparability_key({"params": ddp.params()}) != comparability_key({"params": fsdp.params()})
    for allow in (False, True):
        result = compare([_bundle(tmp_path, f"d{allow}", ddp), _bundle(tmp_path, f"f{allow}", fsdp)],
                         allow_incomparable=allow)
        assert not result.rows and result.unmatched  # compare exits 2: no (case id, backend) in common
