"""The cheaper paths validation takes (issue 42 item 5; benchmarks/validation_cost.py measures the seconds) give
what the plain ones gave: a bundle's speedup draws counted rather than sorted, compare's resampled medians computed
once per distinct pair of ranks and their bootstrap bounds counted from the distinct ratios, cases.jsonl read a line
at a time where it lies, every sample checked in one conversion (and samples that are no finite seconds named, never
a traceback), and an `xmfu` process that held its bundles leaving without freeing them one object at a time, its
output and its exit handlers intact."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import SECOND_MATMUL
from xmfu.harness.results.analysis import compare
from xmfu.harness.results.bundle.records import _lines
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.statistics import paired_bounds, quantiles, summary

ROOT = Path(__file__).resolve().parents[2]


def test_a_draws_median_counted_is_the_median_of_the_sorted_draw_to_the_bit():
    """paired_bounds._drawn_medians against sorting each draw's values (blocks[:, picks]) and taking np.median:
    rounds of one sample and of several, ties, an odd and an even count of values, one round; counted through the
    table of pair means (up to 16 values a draw) and through two gathers (more)."""
    rng = np.random.default_rng(4)
    for rounds, per_round, draws in ((10, 1, 300), (7, 3, 200), (1, 1, 5), (5, 2, 50), (12, 4, 100), (3, 5, 40)):
        blocks = rng.lognormal(size=(9, rounds, per_round))
        blocks[::2] = np.round(blocks[::2], 1)  # ties
        picks = rng.integers(0, rounds, size=(draws, rounds))
        counts = np.zeros((rounds, draws), dtype=np.int64)
        np.add.at(counts, (picks, np.arange(draws)[:, None]), 1)
        want = np.median(blocks[:, picks].reshape(9, draws, -1), axis=-1)
        assert np.array_equal(paired_bounds._drawn_medians(blocks, counts), want), (rounds, per_round)


def test_resampled_medians_of_distinct_rank_pairs_are_each_draws_own():
    """summary.resampled_medians_sorted computes each distinct pair of middle ranks once: every draw's value is the
    mean of its own two order statistics, bit for bit, for odd and even sample counts."""
    rng = np.random.default_rng(8)
    for n in (1, 2, 3, 10, 11, 64, 401):
        x = np.sort(rng.lognormal(size=(20, n)), axis=1)
        got = summary.resampled_medians_sorted(x, 700, np.random.default_rng(n))
        low, high = summary.median_ranks(n, (1, 700), np.random.default_rng(n))
        want = x[:, low[0]] if high is None else (x[:, low[0]] + x[:, high[0]]) / 2
        assert got.shape == want.shape and np.array_equal(got, want), n


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # infinity minus infinity in the interpolation, as numpy's
def test_quantiles_of_repeated_values_are_np_quantile_of_the_repeats_to_the_bit():
    """quantiles.repeated_quantiles against np.quantile of the values repeated as counted: ties, NaN and infinity in
    a row, one distinct value, one draw in all, the range's ends and its middle."""
    rng = np.random.default_rng(11)
    for distinct, rows in ((1, 3), (2, 5), (7, 40), (60, 30), (300, 8)):
        values = rng.lognormal(size=(rows, distinct))
        values[::3] = np.round(values[::3], 1)  # ties between distinct columns
        if distinct > 1:
            values[1, 0], values[2, 1] = np.nan, np.inf
        for counts in (rng.integers(1, 9, size=distinct), np.ones(distinct, dtype=np.int64)):
            for q in ([0.025, 0.975], [0.0, 0.5, 1.0], [0.3]):
                want = np.quantile(np.repeat(values, counts, axis=1), q, axis=1)
                got = quantiles.repeated_quantiles(values, counts, q)
                assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True), (distinct, q)


def _within_by_every_draw(pairs, seed=0):
    """compare.within_run_intervals as it was written before: every draw's ratio built, np.quantile over them."""
    rng, out, groups = np.random.default_rng(seed), [None] * len(pairs), {}
    for i, (b, c) in enumerate(pairs):
        groups.setdefault((b.size, c.size), []).append(i)
    for index in groups.values():
        base = np.sort(np.stack([pairs[i][0] for i in index]), axis=1)
        cand = np.sort(np.stack([pairs[i][1] for i in index]), axis=1)
        ratios = summary.resampled_medians_sorted(base, compare.RESAMPLES, rng) / summary.resampled_medians_sorted(
            cand, compare.RESAMPLES, rng)
        lows, highs = np.quantile(ratios, [0.025, 0.975], axis=1)
        values = np.median(base, axis=1) / np.median(cand, axis=1)
        for j, i in enumerate(index):
            out[i] = (float(values[j]), float(lows[j]), float(highs[j]))
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a zero median divides by zero in both (inf, NaN), alike
def test_compare_within_run_intervals_counted_are_those_of_every_draw_to_the_bit():
    """compare.within_run_intervals counts each distinct pair of resampled medians once: the same value and bounds
    as building all 1,000 draws of every row, for groups of several sample counts, ties and zero medians."""
    rng = np.random.default_rng(12)
    pairs = [(rng.lognormal(size=n), np.round(rng.lognormal(size=m) * scale, 1))
             for n, m in ((10, 10), (1, 1), (3, 2), (31, 30), (2, 7)) for scale in (1.0, 0.05) for _ in range(25)]
    got, want = compare.within_run_intervals(pairs), _within_by_every_draw(pairs)
    assert np.array_equal(np.array(got), np.array(want), equal_nan=True)


@pytest.mark.parametrize("raw", [b"", b"a\n", b"a\nb\n", b"a\nb", b"\n\na\n", b"a\r\nb\r\n", b"a\rb\n", b"a\r\n\r\n",
                                 b'{"x": "[{"}\n[[1]]\n', b"\r", b"x\n\r"])
def test_a_files_lines_are_split_as_splitlines_splits_them(raw):
    """bundle/records._lines hands each line as bytes.splitlines() gives it (views of the buffer where lines end at
    \\n alone), with the count of `[` and `{` in it."""
    got = [(bytes(line), brackets) for line, brackets in _lines(raw)]
    assert got == [(line, line.count(b"[") + line.count(b"{")) for line in raw.splitlines()]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    from xmfu.harness.cli.main import main

    tmp = tmp_path_factory.mktemp("validation-paths")
    run = ["run", "workload=matmul", "workload.sizes=[16]", f"backends=[torch,{SECOND_MATMUL}]", "baseline=torch",
           "dtype=fp32", "timing=quick", "timing.max_time_s=0.05", "timing.warmup_s=0", "timing.min_samples=5",
           "timing.max_samples=10", "timing.round_samples=1", f"results_dir={tmp}", "run_id=small"]
    assert main(run) == 0
    assert load_bundle(tmp / "small").problems == []
    return tmp / "small"


def _with_sample(bundle: Path, to: Path, text: str) -> Path:
    """The bundle with its first samples record's first sample written as `text` (raw JSON), sums renewed."""
    import shutil

    shutil.copytree(bundle, to)
    lines = (to / "samples.jsonl").read_bytes().splitlines()
    rec = json.loads(lines[0])
    first = json.dumps(rec["samples"][0])
    lines[0] = lines[0].replace(f'"samples": [{first}'.encode(), f'"samples": [{text}'.encode(), 1)
    assert lines[0] != (bundle / "samples.jsonl").read_bytes().splitlines()[0]
    (to / "samples.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    sums = []
    for line in (to / "SHA256SUMS").read_text().splitlines():
        name = line.partition("  ")[2]
        sums.append(f"{hashlib.sha256((to / name).read_bytes()).hexdigest()}  {name}\n")
    (to / "SHA256SUMS").write_text("".join(sums))
    return to


@pytest.mark.parametrize(("text", "said"), [
    ("1" + "0" * 400, "samples must be finite, non-negative seconds"),  # an integer past any float
    ("-0.5", "samples must be finite, non-negative seconds"),
    ('"0.001"', "samples.jsonl line 1: samples[0]: expected `float`, got `str`"),
    ("[0.001]", "samples are not all numbers"),
    ("true", "samples.jsonl line 1: samples[0]"),
], ids=["huge-integer", "negative", "string", "nested", "bool"])
def test_samples_that_are_no_finite_seconds_are_named_without_a_traceback(small, tmp_path, text, said):
    """Every sample is checked in one conversion; where that fails, each record alone names what is wrong, and no
    later check (time statistics, speedups, warm-up) trips over the value."""
    loaded = load_bundle(_with_sample(small, tmp_path / "forged", text))
    assert any(said in p for p in loaded.problems), loaded.problems


def _xmfu(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "xmfu", *args], capture_output=True, text=True, env=env, timeout=300,
                          cwd=ROOT)


def test_an_xmfu_process_that_held_bundles_prints_all_of_what_main_prints(small, capsys):
    """`xmfu compare` and `xmfu validate` leave without freeing what they held (main.leave_without_freeing): what
    they print and their status are what `main` gives in this process."""
    from xmfu.harness.cli.main import main

    for args in (["compare", str(small), str(small)], ["compare", str(small), str(small), "--format", "json"],
                 ["validate", str(small)], ["compare", str(small), str(ROOT / "no-such-bundle")]):
        status = main(args)
        said = capsys.readouterr()
        done = _xmfu(*args)
        assert (done.returncode, done.stdout, done.stderr) == (status, said.out, said.err), args


def test_leaving_without_freeing_runs_the_exit_handlers_and_flushes_the_streams(tmp_path):
    """leave_without_freeing: the atexit handlers run (a temporary folder's finalizer removes it), buffered output
    reaches its pipe, and the status is the command's."""
    script = textwrap.dedent(f"""
        import atexit, sys, tempfile
        sys.path.insert(0, {str(ROOT)!r})
        from xmfu.harness.cli.main import leave_without_freeing
        kept = tempfile.TemporaryDirectory(dir={str(tmp_path)!r})
        atexit.register(lambda: print("handler ran", file=sys.stderr))
        sys.stdout.write("no newline, still buffered")
        leave_without_freeing(3)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert done.stdout == "no newline, still buffered" and "handler ran" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_reader_that_leaves_early_is_no_error(small):
    """`xmfu compare A B | head -1`: the pipe closes before xmfu is done; xmfu ends quietly, as for `xmfu peaks`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = f"{sys.executable} -m xmfu compare {small} {small} {small} | head -c 10"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr


def test_the_warmup_figures_of_typed_records_are_those_the_type_walk_gives():
    """rederive/warmup.warmup_figures(typed=True), for records every line of which fit their typed declaration (all
    floats): the figures the walk over each value's type gives, record for record."""
    from xmfu.harness.results.rederive import warmup

    rng = np.random.default_rng(12)
    records = [{"samples": [float(v) for v in rng.lognormal(size=int(n))],
                "warmup": [float(v) for v in rng.lognormal(size=int(w))]}
               for n, w in zip(rng.integers(1, 12, 300), rng.integers(0, 40, 300), strict=True)]
    records += [{"samples": [], "warmup": [1.0] * 9}, {"samples": [1.0], "warmup": []}]
    assert warmup.warmup_figures(records, typed=True) == warmup.warmup_figures(records)
