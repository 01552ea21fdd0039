"""timing.fresh_inputs (engine/fresh.py) and the re-check of the last timed output (engine/recheck.py): new inputs
before every call, outside its timing; the timed call's own output read back and checked against them; what cannot
take fresh inputs is skipped, saying so; settings that cannot go with it are refused."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import refused_here, run_config
from xmfu.harness.engine import recheck
from xmfu.harness.engine.attempts import Attempt
from xmfu.harness.engine.case import Prepared
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.fresh import Fresh, FreshInputsTimer, unsupported
from xmfu.harness.engine.timers import HostTimer
from xmfu.harness.engine.timing import Series
from xmfu.harness.machine import compat
from xmfu.workloads.membw.spec import MembwCase

CASE = MembwCase("scale", 1024, "fp32")


class Draining(HostTimer):
    """A timer that calls once before its window (as JAX's and read-back's do) unless told not to."""

    drain = True

    def measure(self, fn, inner):
        if self.drain:
            fn()
        return super().measure(fn, inner)


def _backend():
    """A membw scale done in numpy on buffers `fresh` rewrites: what each call saw, what it returned."""
    x = CASE.inputs()["x"].copy()
    seen: list[float] = []

    def call():
        seen.append(float(x[0]))
        return 3.0 * x

    def write(new):
        x[:] = new.inputs()["x"]

    return call, write, seen


def test_new_inputs_are_written_before_every_call_outside_its_timing_and_no_call_drains_first():
    call, write, seen = _backend()
    fresh = Fresh(write, CASE)
    base = Draining()
    timer = FreshInputsTimer(base, fresh)
    assert base.drain is False and "after new inputs" in timer.name
    timer.measure(call, 3)
    assert len(fresh.costs) == 3 and len(seen) == 3 and len(set(seen)) == 3  # three calls, three inputs
    assert fresh.current.seed != CASE.seed and seen[-1] == float(fresh.current.inputs()["x"][0])
    assert np.array_equal(timer.last_output, 3.0 * fresh.current.inputs()["x"])


def test_the_last_timed_output_is_checked_against_the_last_inputs_written():
    call, write, _ = _backend()
    fresh = Fresh(write, CASE)
    a = Attempt("numpy", prepared=Prepared(call, lambda rows: call(), "host", output=recheck.read_output),
                fresh=fresh)
    a.series = Series("numpy", call, FreshInputsTimer(HostTimer(), fresh), keep_output=True)
    a.series.take(0)
    recheck.timed_output(a, CASE, fresh_required=True)
    assert a.status == "ok" and a.timed_check["ok"] is True and a.series.last_output is None
    assert a.timed_check["inputs"] == f"timing.fresh_inputs' last (seed {fresh.current.seed})"


def test_a_stale_output_is_incorrect_and_one_that_cannot_be_read_is_said_or_under_fresh_inputs_fails():
    stale = 3.0 * CASE.inputs()["x"]  # right for the case, wrong for any new inputs
    a = Attempt("stale", prepared=Prepared(lambda: stale, lambda rows: stale, "host", output=recheck.read_output),
                fresh=Fresh(lambda new: None, CASE))
    a.series = Series("stale", lambda: stale, FreshInputsTimer(HostTimer(), a.fresh), keep_output=True)
    a.series.take(0)
    recheck.timed_output(a, CASE, fresh_required=True)
    assert a.status == "incorrect" and "re-checked after the timed loop" in a.reason
    b = Attempt("none", prepared=Prepared(lambda: None, lambda rows: stale, "host", output=recheck.read_output))
    b.series = Series("none", lambda: None, HostTimer(), keep_output=True)
    b.series.take(0)
    recheck.timed_output(b, CASE, fresh_required=False)
    assert b.status == "ok" and b.timed_check["ok"] is None and "returned NoneType, no array" in b.timed_check["note"]
    b.series.take(1)
    recheck.timed_output(b, CASE, fresh_required=True)
    assert b.status == "failed" and b.reason.startswith("timing.fresh_inputs: the output of the last timed call")


def test_a_builtin_without_a_reader_says_it_was_not_rechecked():
    a = Attempt("builtin", prepared=Prepared(lambda: 1, lambda rows: 1, "host"))
    a.series = Series("builtin", lambda: 1, HostTimer())
    a.series.take(0)
    recheck.timed_output(a, CASE, fresh_required=False)
    assert a.status == "ok" and a.timed_check == {"ok": None, "note": recheck.NO_READER}


def test_the_plugin_reader_reads_the_array_a_call_returns_at_the_check_rows():
    rows = np.array([0, 2])
    out = torch.arange(12.0).reshape(4, 3)
    assert recheck.read_output((out, "extra"), rows).tolist() == [[0, 1, 2], [6, 7, 8]]
    assert recheck.read_output(np.arange(4.0), None).dtype == np.float64
    with pytest.raises(ValueError, match="not rows of one array"):
        recheck.read_output(out, {"batch": 1})


def test_what_cannot_take_fresh_inputs_is_named():
    assert "has no fresh_inputs" in unsupported(Prepared(lambda: 1, lambda rows: 1, "host"), CASE)
    with_writer = Prepared(lambda: 1, lambda rows: 1, "host", fresh_inputs=lambda new: None)
    assert unsupported(with_writer, CASE) is None
    assert "no seed" in unsupported(with_writer, object())


@pytest.mark.parametrize("other", ["cuda_graph", "cold_cache"])
def test_settings_that_cannot_go_with_fresh_inputs_are_refused(other):
    with pytest.raises(ConfigError, match=r"cannot be combined with timing\.fresh_inputs"):
        run_config(timing={"fresh_inputs": True, other: True})


@pytest.mark.slow(seconds=10)
def test_the_builtin_membw_backends_time_on_fresh_inputs_and_pass_the_recheck(cli, tmp_path):
    done = cli("run", "workload=membw", "workload.kernels=[triad]", "workload.sizes=[65536]", "dtype=fp32",
               "backends=[torch,jax,triton]", "timing=quick", "timing.max_time_s=0.3", "timing.warmup_s=0",
               "timing.fresh_inputs=true", "telemetry.enabled=false", f"results_dir={tmp_path}", "run_id=m")
    assert done.returncode == 0, done.stderr
    rows = {r["backend"]: r for r in map(json.loads, (Path(tmp_path) / "m" / "cases.jsonl").read_text().splitlines())}
    for backend in ("torch", "jax"):
        row = rows[backend]
        if backend == "jax" and (why := refused_here("jax")):  # a stack without JAX: refused with the reason
            assert row["status"] == "skipped" and row["reason"] == why, row
            continue
        assert row["status"] == "ok" and row["timed_check"]["ok"] is True, row
        assert row["timer"]["fresh_inputs_calls"] > row["time_s"]["n"]  # warm-up calls read new inputs too
    too_old = compat.triton_interpreter_too_old()  # triton < 3.4 on a CPU (the floor): refused with the reason
    if too_old:
        assert rows["triton"]["status"] == "skipped" and too_old in json.dumps(rows["triton"]), rows["triton"]
    else:
        assert rows["triton"]["status"] == "ok" and "timed_check" not in rows["triton"]  # the interpreter: never timed
    assert cli("validate", str(tmp_path / "m")).returncode == 0


def test_a_fresh_case_is_the_rows_case_at_another_seed():
    fresh = Fresh(lambda new: None, CASE)
    fresh.renew()
    assert replace(fresh.current, seed=CASE.seed) == CASE


def test_no_output_outlives_its_sample_unless_it_is_to_be_read_back():
    timer = HostTimer()
    kept, dropped = Series("kept", lambda: [1.0], timer, keep_output=True), Series("dropped", lambda: [2.0], timer)
    kept.take(0)
    dropped.take(0)
    assert kept.last_output == [1.0] and dropped.last_output is None and timer.last_output is None
