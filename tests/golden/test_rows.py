"""The engine writes the same bytes for the same samples as it did (tests/golden/rows.py)."""

from __future__ import annotations

import pytest

from tests.golden import rows


@pytest.mark.slow(seconds=10)
@pytest.mark.parametrize("scenario", sorted(rows.SCENARIOS))
def test_the_engine_writes_the_bundle_it_wrote_for_these_samples(scenario, tmp_path):
    found = rows.contents(rows.write_scenario(scenario, tmp_path))
    for name, text in found.items():
        expected = (rows.EXPECTED / scenario / name).read_text()
        assert text == expected, f"{scenario}/{name} changed (python -m tests.golden.rows writes it anew; diff it)"


def test_the_scripted_clock_makes_the_samples_and_not_the_machine(tmp_path):
    """The golden bundles hold timed rows with real statistics, so the comparison above can fail on a row change."""
    import json

    cases = [json.loads(line) for line in (rows.EXPECTED / "matmul-gpu" / "cases.jsonl").read_text().splitlines()]
    timed = [r for r in cases if r["time_s"]]
    assert timed and all(r["mfu"] is not None and r["time_s"]["n"] >= 5 for r in timed)
    assert {r["status"] for r in cases} == {"ok", "skipped", "failed", "incorrect"}
