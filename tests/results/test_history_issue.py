"""A regression report ready to file (issue 38, item 4): `xmfu history issue --store S SERIES`."""

from __future__ import annotations

import pytest

from tests.results.test_history_changes import _attention, _bundle, _matmul, planted
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.history import parquet, streak

pytest.importorskip("pyarrow", exc_type=ImportError)

SERIES = "matmul matmul-bf16-8192x8192x8192-NN torch GPU A bf16"


@pytest.fixture
def store(tmp_path):
    """test_history_changes' store: seven steady nights, then one 14% slower on torch 2.14.0 in another image."""
    return planted(tmp_path)


def test_the_body_names_the_streak_the_toolchain_between_and_the_repro(store, tmp_path, cli):
    out = cli("history", "issue", "--store", str(store), "8192x8192")
    assert out.returncode == 0, out.stderr
    body = out.stdout
    assert body.startswith(f"# Regression: {SERIES} tflops -14.4% since 2026-11-08\n")
    assert "- First bad run: night7 (2026-11-08 02:00 UTC), tflops 600 against the baseline 701" in body
    assert "- Last good run: night6 (2026-11-07 02:00 UTC), tflops 700" in body
    assert "- torch: 2.13.0 -> 2.14.0\n- image_digest: sha256:aaa -> sha256:bbb" in body
    assert "```sh\nxmfu run experiment=nightly 'suite.only=[matmul]' results_dir=/scratch/n\n```" in body
    assert f"Bundle: {(tmp_path / 'b' / 'night7').resolve()}" in body
    assert "| 2026-11-07 02:00 | night6 | 700 | last good |\n| 2026-11-08 02:00 | night7 | 600 | first bad |" in body
    assert cli("history", "issue", "--store", str(store), SERIES).stdout == body  # the exact label names it too


def test_a_streak_of_several_runs_starts_at_its_first_bad_one(store, tmp_path):
    for night in (8, 9):
        folder = _bundle(tmp_path / "b", night, [_matmul(8192, 599.0 + night % 2), _attention()], torch="2.14.0")
        parquet.add(store, read_bundle(folder), {})
    rows = parquet.load(store)
    ((key, label),) = streak.matching(rows, "tflops", SERIES)
    found = streak.streak(rows, key, label, "tflops")
    assert found.first_bad.run_id == "night7" and found.last_good.run_id == "night6" and found.runs_since == 3
    assert found.flips == 1 and len(found.points) == 10 and found.repro[1].endswith("night7")


def test_a_series_not_in_a_regression_says_so_and_a_name_must_pick_one_series(store, cli):
    att = cli("history", "issue", "--store", str(store), "att triton")
    assert att.returncode == 0 and att.stdout.startswith("# attention att triton GPU A bf16 tflops: no regression now")
    assert "Its latest row is failed: night7 (2026-11-08 02:00 UTC)." in att.stdout
    several = cli("history", "issue", "--store", str(store), "matmul")
    assert several.returncode == 2 and "'matmul' matches 2 series (matmul matmul-bf16-8192" in several.stderr
    assert several.stderr.count("\n") == 1
    none = cli("history", "issue", "--store", str(store), "collectives")
    assert none.returncode == 2 and "matches no series with ok, validly timed tflops rows" in none.stderr
