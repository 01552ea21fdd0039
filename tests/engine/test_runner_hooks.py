"""The engine hooks a distributed workload uses: the case as the backend ran it, variants timed with the step
(adaptive rounds and fixed plans, gathered over ranks like the step), files attached to the bundle, and
figures derived from the finished row and the run's earlier rows."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tests.engine.test_runner import FakeCase, _runner, always
from xmfu.harness.engine.case import FixedPlan, Prepared
from xmfu.harness.engine.registry import Implementation, WorkloadDef
from xmfu.harness.engine.runner import Phase
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle


@dataclass(frozen=True)
class WideCase(FakeCase):
    devices: int = 1

    def params(self):
        return {"size": self.size, "devices": self.devices}

    def flops(self):
        return 1e3 * self.size / self.devices


def _prepare(fixed, gather=None):
    def prepare(case, ctx):
        return Prepared(lambda: sum(range(200)), lambda rows: np.full(4, 1.0), "host", fixed=fixed, gather=gather,
                        rank_combine="max", case=replace(case, devices=4), attachments={"trace.json": b"{}"},
                        variants={"quiet": lambda: sum(range(100)), "loud": lambda: sum(range(300))})
    return prepare


def _derive(row, rows):
    """Declared fields only (the row refuses others): what derive saw, in fields a distributed row has."""
    return {"scaling_note": f"earlier rows: {len(rows)}",
            "comm_total_s": row["variants"]["loud"]["time_s"]["median"] / row["time_s"]["median"]}


def _run(tmp_path, fixed=None, gather=None):
    workload = WorkloadDef("fake", lambda *a: [WideCase(1)], {"good": Implementation("good", always,
                                                                                      _prepare(fixed, gather))},
                           derive=_derive)
    runner, writer = _runner(tmp_path)
    runner.run_phase(Phase("main", workload, [WideCase(1), WideCase(2)], ["good"]))
    writer.finalize("complete")
    return read_bundle(tmp_path / "b")


def test_variants_are_timed_with_the_step_and_rows_use_the_resolved_case(tmp_path):
    bundle = _run(tmp_path)
    row, samples = bundle.raw_rows[1], bundle.samples[1]
    assert row["params"] == {"size": 2, "devices": 4} and row["flops"] == 0.5e3  # the case as the backend ran it
    assert set(row["variants"]) == {"quiet", "loud"} and row["variants"]["loud"]["time_s"]["n"] >= 3
    assert row["scaling_note"] == "earlier rows: 1"  # derive saw the rows written before this one
    assert row["comm_total_s"] > 0  # and the variants' figures
    assert len(samples["variants"]["quiet"]["samples"]) == row["variants"]["quiet"]["time_s"]["n"]
    assert row["attachments"] == ["fake-2.good.trace.json"]
    assert (tmp_path / "b" / "fake-2.good.trace.json").read_bytes() == b"{}"
    assert bundle.manifest["attachments"] == ["fake-1.good.trace.json", "fake-2.good.trace.json"]
    assert validate_bundle(tmp_path / "b") == []


def test_under_a_fixed_plan_variants_take_turns_and_are_gathered_like_the_step(tmp_path):
    calls = []

    def gather(samples):
        calls.append(len(samples))
        return [samples, [s * 2 for s in samples]]  # a slower second rank

    bundle = _run(tmp_path, FixedPlan(warmup=1, samples=4, inner=1), gather)
    row, samples = bundle.raw_rows[0], bundle.samples[0]
    assert calls == [4, 4, 4, 4, 4, 4]  # step, quiet, loud for each of the two cases
    assert row["variants"]["quiet"]["time_s"]["n"] == 4 and len(row["variants"]["quiet"]["per_rank_median_s"]) == 2
    quiet = samples["variants"]["quiet"]
    assert quiet["samples"] == [max(a, b) for a, b in zip(*quiet["rank_samples"], strict=True)]  # "max" combine
    assert row["ranks"] == 2 and row["rank_combine"] == "max"


@dataclass(frozen=True)
class SlashCase(WideCase):
    """A case whose id would put its attachment outside the bundle (a model name with `/`, issue 26 item 4)."""

    @property
    def case_id(self):
        return f"fake-../{self.size}" if self.size == 1 else f"fake-{self.size}"


def test_an_attachment_with_an_unusable_name_is_refused_on_its_row_and_the_run_goes_on(tmp_path):
    prepare = _prepare(None)
    workload = WorkloadDef("fake", lambda *a: [], {"good": Implementation("good", always, prepare)})
    runner, writer = _runner(tmp_path)
    runner.run_phase(Phase("main", workload, [SlashCase(1), SlashCase(2)], ["good"]))
    writer.finalize("complete")
    bundle = read_bundle(tmp_path / "b")
    first, second = bundle.raw_rows
    assert first["status"] == "ok" and not first.get("attachments")  # the measured row is kept, without the file
    assert "must be a new plain file name" in first["notes"]["attachments_refused"]["fake-../1.good.trace.json"]
    assert second["attachments"] == ["fake-2.good.trace.json"]
    assert not (tmp_path / "1.good.trace.json").exists()
    assert validate_bundle(tmp_path / "b") == []
