"""History: idempotent, concurrent-safe appends; trends and the platform gap; regression detection."""

from __future__ import annotations

import multiprocessing

import pytest
from msgspec.structs import asdict, replace

from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.history import judge, parquet
from xmfu.harness.results.history.stored import Stored

pytest.importorskip("pyarrow", exc_type=ImportError)  # pyarrow 2x on numpy 1.x raises ImportError


def _make(tmp_path, name, median, created="2026-11-01T00:00:00.000000Z"):
    from tests.results.test_compare import _bundle

    return _bundle(tmp_path, name, median, created=created)


def _add(args):
    store, folder = args
    from xmfu.harness.results.history.parquet import add

    return add(store, read_bundle(folder), {})


def test_add_is_idempotent_and_safe_under_concurrency(tmp_path):
    store = tmp_path / "store"
    folders = [_make(tmp_path, f"run{i}", 1.0 + i / 100).folder for i in range(6)]
    jobs = [(store, f) for f in folders] * 2  # every bundle twice, from 4 processes at once
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        added = pool.map(_add, jobs)
    assert sum(added) == 6  # each run stored exactly once
    rows = parquet.load(store)
    assert sorted(r.run_id for r in rows) == [f"run{i}" for i in range(6)]
    assert not list(store.glob(".*.tmp"))


def test_pandas_reads_the_store_as_one_table(tmp_path):
    """The module's promise: pandas (the `history` extra) reads the folder of Parquet files as one table."""
    pd = pytest.importorskip("pandas")
    store = tmp_path / "store"
    for i in range(2):
        parquet.add(store, read_bundle(_make(tmp_path, f"run{i}", 1.0 + i / 10).folder), {})
    table = pd.read_parquet(store)
    assert sorted(table["run_id"].unique()) == ["run0", "run1"] and len(table) == len(parquet.load(store))


def _rows(values, device="GPU A", platform="cuda"):
    """One stored matmul row per value (tflops), a night apart, as `parquet.load` gives them."""
    return [Stored(run_id=f"r{i}", created=parquet.when(f"2026-11-{i + 1:02d}T00:00:00Z"), workload="matmul",
                   case_id="c", backend="torch", device=device, platform=platform, dtype="bf16", status="ok",
                   timing_valid=True, tflops=v, mfu=v / 1000, comparability_key="k")
            for i, v in enumerate(values)]


def test_check_flags_a_step_but_not_noise():
    noisy = [700 + d for d in (3, -2, 4, -3, 1, -4, 2, 0, -1, 3)]
    assert judge.check(_rows(noisy), "tflops") == []
    stepped = [*noisy, 640.0]  # -8.6%, far outside the noise
    (flag,) = judge.check(_rows(stepped), "tflops")
    assert flag["baseline"] == 700 and flag["latest"] == 640  # median of the previous 7 values
    assert flag["change"] == pytest.approx(640 / 700 - 1)


def test_gap_between_platforms_per_day():
    rows = _rows([600, 610], device="AMD", platform="rocm") + _rows([800, 800], device="NV", platform="cuda")
    gap = judge.gap(rows, "tflops", "rocm", "cuda")
    assert [g["ratio"] for g in gap] == [pytest.approx(0.75), pytest.approx(610 / 800)]


def test_cli_add_trend_check(tmp_path, cli):
    """In-process (tests/e2e/test_lazy_imports.py runs history commands as processes)."""
    store = tmp_path / "store"
    folders = [_make(tmp_path, f"n{i}", 1.0, created=f"2026-11-0{i + 1}T00:00:00.000000Z").folder for i in range(4)]

    def xmfu(*args):
        return cli("history", *args, "--store", str(store))

    assert "added" in xmfu("add", *map(str, folders)).stdout
    assert "already in the store" in xmfu("add", str(folders[0])).stdout
    trend = xmfu("trend", "--metric", "median_s", "-o", str(tmp_path / "t.svg"))
    assert trend.returncode == 0 and "4 points" in trend.stdout
    assert (tmp_path / "t.svg").read_text().startswith("<svg")
    assert xmfu("check", "--metric", "median_s").returncode == 0


@pytest.mark.parametrize("run_id", ["../x", "/abs/path", "a/b", ".hidden", "", "x" * 300, 5])
def test_the_store_only_ever_writes_inside_itself(tmp_path, run_id):
    with pytest.raises(ValueError, match="run id"):
        parquet.store_file(tmp_path / "store", run_id)
    assert parquet.store_file(tmp_path / "store", "20261123T000000Z-matmul-bf16-abc").parent == (
        tmp_path / "store").resolve()


def test_runs_with_another_comparability_key_are_another_series():
    same = _rows([700, 705, 702])
    other = [replace(r, run_id=f"p{i}", comparability_key="k-peak450", mfu=r.tflops / 450)
             for i, r in enumerate(_rows([703]))]
    found = judge.series(same + other, "mfu")
    assert sorted(len(v) for v in found.values()) == [1, 3]  # never one line dropping to zero
    labels = [judge.series_label(k, list(found)) for k in found]
    assert sorted(labels) == ["matmul c torch GPU A bf16 [key k-peak450]", "matmul c torch GPU A bf16 [key k]"]
    from xmfu.harness.results.history import trend

    lines = trend.series_groups(found)["matmul"]
    assert sorted(len(v) for v in lines.values()) == [1, 3]
    assert judge.check(same + other, "mfu") == []  # the odd run is not a step in the first series


def test_gap_pairs_only_cases_with_the_same_comparability_key():
    rocm = _rows([600], device="AMD", platform="rocm")
    cuda = [replace(r, comparability_key="other") for r in _rows([800], device="NV", platform="cuda")]
    assert judge.gap(rocm + cuda, "tflops", "rocm", "cuda") == []
    (g,) = judge.gap(rocm + _rows([800], device="NV", platform="cuda"), "tflops", "rocm", "cuda")
    assert g["ratio"] == pytest.approx(0.75) and g["comparability_key"] == "k"


def _mixed_store(tmp_path):
    """A matmul run, a collectives run whose tflops and mfu are all null, an attention run."""
    from tests.results.rows import attention_row, collectives_row, matmul_row, write_bundle

    store = tmp_path / "store"
    runs = {"m": [matmul_row(256, 256, 256)], "c": [collectives_row(1024), collectives_row(4096)],
            "a": [attention_row(128, True, "fwd")]}
    for i, (run_id, rows) in enumerate(runs.items()):
        bundle = write_bundle(tmp_path, run_id, rows, created=f"2026-11-0{i + 1}T03:00:00.000000Z")
        assert parquet.add(store, bundle, bundle.environment())
    return store


def test_one_schema_so_pandas_and_arrow_read_a_mixed_store(tmp_path):
    pd = pytest.importorskip("pandas")
    import pyarrow.dataset as ds

    store = _mixed_store(tmp_path)
    frame = pd.read_parquet(store)
    assert len(frame) == 4 and frame["tflops"].dtype == "float64" and frame["timing_valid"].dtype == bool
    assert str(frame["created"].dtype) == "datetime64[us, UTC]" and frame["tflops"].isna().sum() == 2
    table = ds.dataset(store, format="parquet").to_table()
    assert table.schema.equals(parquet.schema()) and table.num_rows == 4
    assert {r.workload for r in parquet.load(store)} == {"matmul", "collectives", "attention"}


def test_a_store_written_by_the_old_code_still_loads_and_is_rewritten(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pd = pytest.importorskip("pandas")
    store = tmp_path / "store"
    store.mkdir()
    old = {"run_id": "old", "created": "2026-10-01T00:00:00.000000Z", "workload": "collectives", "case_id": "c",
           "backend": "torch_dist", "device": "GPU A", "platform": "cuda", "dtype": "fp32", "status": "ok",
           "timing_valid": True, "comparability_key": "k", "tflops": None, "mfu": None, "busbw_gbps": 3}
    pq.write_table(pa.Table.from_pylist([old]), store / "old.parquet")  # null-typed, int and text columns
    assert pq.read_schema(store / "old.parquet").field("tflops").type == pa.null()
    (row,) = parquet.load(store)  # cast on read
    assert row.busbw_gbps == 3.0 and row.created.year == 2026 and row.tflops is None and row.platform == "cuda"
    assert row.flags is None and row.variant is None  # columns the old code did not write read as null
    _mixed_store(tmp_path)  # the next add rewrites the old file in the one schema
    assert pq.read_schema(store / "old.parquet").equals(parquet.schema())
    assert len(pd.read_parquet(store)) == 5


def _cli(*args):
    from xmfu.harness.cli.main import main

    return main(["history", *map(str, args)])


def test_trend_writes_svg_or_a_self_contained_page_with_dates(tmp_path, capsys):
    store = _mixed_store(tmp_path)
    assert _cli("trend", "--store", store, "--metric", "tflops", "-o", tmp_path / "t.html") == 0
    page = (tmp_path / "t.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "<svg" in page
    assert "date of the run (UTC)" in page and "Nov" in page and "e+0" not in page
    assert _cli("trend", "--store", store, "--metric", "busbw_gbps", "-o", tmp_path / "t.svg") == 0
    assert (tmp_path / "t.svg").read_text().startswith("<svg")
    assert _cli("trend", "--store", store, "-o", tmp_path / "t.png") == 2
    assert "unknown suffix '.png'. Allowed: .svg, .html" in capsys.readouterr().err


def test_store_problems_are_one_paragraph_and_exit_2(tmp_path, capsys):
    empty, missing, a_file = tmp_path / "empty", tmp_path / "missing", tmp_path / "file"
    empty.mkdir()
    a_file.write_text("x")
    cases = [(("trend", "--store", empty), "holds no runs yet"), (("check", "--store", empty), "holds no runs yet"),
             (("trend", "--store", missing), "does not exist"), (("check", "--store", missing), "does not exist"),
             (("trend", "--store", a_file), "is a file, not a folder"),
             (("add", tmp_path, "--store", a_file), "is a file, not a folder"),
             (("check", "--store", empty, "--window", "0"), "--window 0 is out of range"),
             (("trend", "--store", empty, "-o", missing / "t.svg"), f"the folder {missing} does not exist")]
    for args, message in cases:
        assert _cli(*args) == 2, args
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, (args, err)
    undated = _make(tmp_path, "undated", 1.0, created="now")
    assert _cli("add", undated.folder, "--store", empty) == 2
    assert "created 'now' is not a UTC ISO 8601 time" in capsys.readouterr().err
    (empty / "bad.parquet").write_text("not parquet")
    assert _cli("trend", "--store", empty) == 2
    err = capsys.readouterr().err
    assert f"{empty / 'bad.parquet'} is not a readable Parquet file" in err and err.count("\n") == 1


def test_check_says_which_series_have_too_few_runs(tmp_path, capsys):
    store = _mixed_store(tmp_path)
    assert _cli("check", "--store", store, "--metric", "tflops") == 0
    out = capsys.readouterr().out
    assert "matmul matmul-bf16-256x256x256-NN torch GPU A bf16: insufficient history (1 of 6)" in out


def _false_alarms(baseline: int, trials: int = 400_000, seed: int = 0) -> float:
    """How often `check`'s rule (3 robust sigmas, the 2% floor not binding) flags pure Gaussian noise: a latest
    point against a baseline of `baseline` points, all drawn from one distribution."""
    import numpy as np

    rng = np.random.default_rng(seed)
    before, latest = rng.standard_normal((trials, baseline)), rng.standard_normal(trials)
    center = np.median(before, axis=1)
    noise = 1.4826 * np.median(np.abs(before - center[:, None]), axis=1)
    return float(np.mean(np.abs(latest - center) > judge.RULE.sigmas * noise))


def test_the_minimum_baseline_and_why():
    """The figures judge.MIN_BASELINE's comment states: with 2 or 3 baseline points (the old minimum was 2)
    3 robust sigmas is pure noise on about a quarter of nights; 5 is the least accepted; 7 (the window) about 9.5%."""
    rates = {n: _false_alarms(n) for n in (2, 3, 5, 7)}
    assert rates[2] == pytest.approx(0.23, abs=0.01) and rates[3] == pytest.approx(0.31, abs=0.01)
    assert rates[5] == pytest.approx(0.15, abs=0.01) and rates[7] == pytest.approx(0.095, abs=0.01)
    assert judge.MIN_BASELINE == 5 and judge.MIN_RUNS == 6
    few = _rows([700, 701, 699, 700, 500])  # a -29% drop after only 4 runs: not judged
    assert judge.check(few, "tflops") == []
    assert [s["runs"] for s in judge.insufficient(few, "tflops")] == [5]


@pytest.mark.parametrize(("extra", "label"), [({"contended": True, "contention": "load 3.1 on 2 cores"}, "contended"),
                                              ({"cv": 0.2}, "noisy"),
                                              ({"median_s": 1.0, "ci95_low_s": 0.8, "ci95_high_s": 1.2}, "noisy"),
                                              ({"cv": 0.01}, None)])
def test_a_flagged_change_carries_its_rows_own_evidence(extra, label):
    rows = _rows([700, 701, 699, 700, 702, 698, 600])  # -14%
    rows[-1] = replace(rows[-1], **extra)
    (flag,) = judge.check(rows, "tflops")
    assert flag.get("unreliable") == label
    if label:
        assert f"[unreliable: {label}: " in judge.describe(flag)


def test_check_exits_0_on_an_unreliable_change_unless_strict(tmp_path, cli):
    from tests.suites.test_nightly import _night

    store = tmp_path / "store"
    for night in range(6):
        parquet.add(store, read_bundle(_night(tmp_path, night, 700.0 + night % 2)), {})
    parquet.add(store, read_bundle(_night(tmp_path, 6, 350.0, contended="another process took 2 cores")), {})
    check = cli("history", "check", "--store", str(store), "--metric", "tflops")
    assert check.returncode == 0 and "UNRELIABLE matmul" in check.stdout and "unreliable: contended" in check.stdout
    strict = cli("history", "check", "--store", str(store), "--metric", "tflops", "--strict")
    assert strict.returncode == 1 and "CHANGED matmul" in strict.stdout


# The gate's rule on synthetic histories (issue 26, item 13): an A/A of one build on a shared 2-core machine raised
# 5 false regressions on rows neither contended nor noisy by their own account, because runs differed by far more
# than the samples within one run, and the MAD of the baseline was near 0 when most of its runs agreed.
BIMODAL = [0.0693, 0.0712, 0.0351, 0.0688, 0.0705, 0.0341, 0.0699]  # bus bandwidth: two levels, run to run


@pytest.mark.parametrize(("values", "why"), [
    ([*BIMODAL, 0.0317], "bimodal: the latest at the low level the series has visited before (-54%)"),
    ([100, 101, 99, 100, 60, 62], "tiny MAD: 4 of 5 baseline runs agree, the fifth and the latest 40% lower"),
])
def test_a_change_within_the_runs_own_spread_is_noisy_not_a_regression(values, why):
    # each run sure of itself
    rows = [replace(r, median_s=1.0, ci95_low_s=0.99, ci95_high_s=1.01, cv=0.01) for r in _rows(values)]
    (flag,) = judge.check(rows, "tflops")
    assert judge.worse("tflops", flag["change"]), why
    assert flag["unreliable"] == "noisy", why
    assert "run-to-run sd" in flag["why"] and "prediction interval" in flag["why"]


@pytest.mark.parametrize("values", [
    [100, 101, 99, 100, 102, 98, 100, 50],  # steady runs, then 2x slower
    [100, 101, 99, 100, 102, 50],  # the same after the least baseline (5 runs)
    [100, 105, 95, 102, 97, 104, 96, 50],  # runs 4% apart, then 2x slower
])
def test_a_real_2x_regression_is_still_judged(values):
    (flag,) = judge.check(_rows(values), "tflops")
    assert flag["change"] == pytest.approx(-0.5, abs=0.03) and not flag.get("unreliable")


def test_the_prediction_bound_and_how_often_pure_noise_crosses_it():
    """judge.run_to_run's docstring: at 5 and 7 baseline runs the bound is 14.3 and 8.6 sds, and normal noise
    crosses it on the side of the worse on PREDICTION_TAIL of nights (here at 0.01 for a simulation's sake)."""
    import numpy as np

    from xmfu.harness.results.statistics.speedup import t_quantile

    tail = judge.PREDICTION_TAIL
    assert tail == 1e-4 and t_quantile(tail, 4) * (1 + 1 / 5) ** 0.5 == pytest.approx(14.28, abs=0.01)
    assert t_quantile(tail, 6) * (1 + 1 / 7) ** 0.5 == pytest.approx(8.58, abs=0.01)
    rng = np.random.default_rng(1)
    for n in (5, 7):
        logs = 0.05 * rng.standard_normal((200_000, n + 1))
        before, latest = logs[:, :n], logs[:, n]
        bound = t_quantile(0.01, n - 1) * before.std(axis=1, ddof=1) * (1 + 1 / n) ** 0.5
        assert np.mean(latest - before.mean(axis=1) < -bound) == pytest.approx(0.01, abs=0.001)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 6, 7, 10, 30, 31, 200])
def test_t_quantile_is_students(df):
    """Against NIST/SEMATECH e-Handbook 1.3.6.7.2's 0.975 and 0.999 columns, and scipy where installed."""
    from xmfu.harness.results.statistics.speedup import T975, t_quantile

    nist_999 = {1: 318.309, 4: 7.173, 6: 5.208, 10: 4.144, 30: 3.385}
    if df <= 30:
        assert t_quantile(0.025, df) == pytest.approx(T975[df - 1], abs=0.0015)
    if df in nist_999:
        assert t_quantile(0.001, df) == pytest.approx(nist_999[df], abs=0.0015)
    try:
        from scipy.stats import t
    except ImportError:
        return
    for tail in (0.025, 1e-3, 1e-4):
        assert t_quantile(tail, df) == pytest.approx(t.ppf(1 - tail, df), rel=1e-6)


def _latency(p50):
    return {"p50": p50, "p90": 1.5 * p50, "p99": 2 * p50, "mean": 1.1 * p50, "n": 20}


def test_an_inference_row_is_stored_with_its_latencies_mbu_tokens_per_s_and_flags(tmp_path):
    """Issue 30, item 12: TTFT (prefill), TPOT and MBU (decode), tokens/s (the phase's tokens: null before, as
    inference rows have no `tokens_per_s` key) and the row's quality flags, beside contended and its reason."""
    import pyarrow.parquet as pq

    from tests.results.rows import valid_row, write_bundle

    def row(phase, **fields):
        return valid_row(peak=100.0, workload="inference", backend="torch", case_id=f"inference-{phase}",
                         params={"phase": phase, "name": "tiny", "batch": 8}, **fields)

    prefill = row("prefill", throughput={"prompt_tokens_per_s": 50_000.0}, ttft_s=_latency(3e-3), mbu=None,
                  timer={"name": "perf_counter", "inner": 1, "stop": "max_time_s", "ci_target_met": False})
    decode = row("decode", throughput={"generated_tokens_per_s": 800.0, "generated_tokens_per_sequence_per_s": 100.0},
                 tpot_s=_latency(1.25e-3), mbu=0.4,
                 contention={"contended": True, "reason": "pid 9 used 50% of a core", "busiest_others": [],
                             "load_avg": [1.0, 1.0, 1.0]})
    bundle = write_bundle(tmp_path, "inf", [prefill, decode])
    store = tmp_path / "store"
    parquet.add(store, bundle, bundle.environment())
    assert pq.read_schema(store / "inf.parquet").equals(parquet.schema())
    got = {r.case_id: r for r in parquet.load(store)}
    p, d = got["inference-prefill"], got["inference-decode"]
    assert p.tokens_per_s == 50_000.0 and p.ttft_s == 3e-3 and p.ttft_p99_s == 6e-3
    assert p.tpot_s is None and p.mbu is None and p.flags == "CI missed" and not p.contended
    assert d.tokens_per_s == 800.0 and d.tpot_s == 1.25e-3 and d.tpot_p99_s == 2.5e-3 and d.mbu == 0.4
    assert d.flags == "contended" and d.contended and d.contention == "pid 9 used 50% of a core"


def _night_file(store, night, tflops, **fields):
    """One stored run of one matmul series, written straight in the store's schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (row,) = _rows([tflops])
    row = replace(row, run_id=f"n{night}", created=parquet.when(f"2026-11-{night + 1:02d}T00:00:00Z"), **fields)
    store.mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist([asdict(row)], schema=parquet.schema()), store / f"n{night}.parquet")


def test_check_shows_the_latest_rows_flags_beside_its_verdict(tmp_path, cli):
    """Issue 30, item 12: `history check` names the latest row's flags beside each verdict: a change, and a series
    within the noise whose latest run is flagged. A store written before the flags column still says contended."""
    store = tmp_path / "store"
    for night in range(6):
        _night_file(store, night, 700.0 + night % 2)
    _night_file(store, 6, 600.0, flags="CI missed, launch-bound")
    check = cli("history", "check", "--store", str(store), "--metric", "tflops")
    assert check.returncode == 1 and "CHANGED matmul c torch GPU A: tflops 600" in check.stdout
    assert "[flags: CI missed, launch-bound]" in check.stdout
    _night_file(store, 6, 700.0, flags="CI missed")
    check = cli("history", "check", "--store", str(store), "--metric", "tflops")
    assert check.returncode == 0 and "FLAGGED matmul c torch GPU A bf16: within the noise; the latest run's row: " \
        "CI missed" in check.stdout
    import pyarrow as pa
    import pyarrow.parquet as pq

    old = pq.read_table(store / "n6.parquet").drop(["flags"])
    old = old.set_column(old.schema.get_field_index("contended"), "contended", pa.array([True]))
    pq.write_table(old, store / "n6.parquet")  # an older file: no flags column, contended true
    check = cli("history", "check", "--store", str(store), "--metric", "tflops")
    assert "the latest run's row: contended" in check.stdout

