"""A row's energy over exactly its timed intervals (harness/results/statistics/energy.py), on made-up series whose
answers are worked out by hand: counter wrap-around and resets, trapezoid power, sampling gaps, per-token figures."""

from __future__ import annotations

import pytest

from xmfu.harness.results.statistics.energy import figures, gaps, window_energy


def test_a_counter_is_read_at_the_intervals_ends_not_at_the_readings():
    # 100 W: the counter climbs 100 J/s; the calls ran in [0.5, 1.5] and [2.25, 2.75]: 1.5 s, 150 J
    points = [(float(t), 100.0 * t) for t in range(5)]
    got = window_energy(points, [(0.5, 1.5), (2.25, 2.75)], "counter")
    assert got.joules == pytest.approx(150.0) and got.timed_s == pytest.approx(1.5)
    assert got.covered_s == pytest.approx(1.5) and got.mean_power_w == pytest.approx(100.0)


def test_a_counter_that_wraps_adds_its_range_and_one_without_a_range_is_a_reset():
    # RAPL-like: range 1000 J, 300 W; the counter reads 900, 200 (wrapped), 500
    points = [(0.0, 900.0), (1.0, 200.0), (2.0, 500.0)]
    assert window_energy(points, [(0.0, 2.0)], "counter", wrap_j=1000.0).joules == pytest.approx(600.0)
    reset = window_energy(points, [(0.0, 2.0)], "counter")  # no range known: [0, 1] is not counted
    assert reset.joules == pytest.approx(300.0) and reset.covered_s == pytest.approx(1.0)


def test_power_is_integrated_by_the_trapezoid_rule_over_the_intervals():
    # power 100 W at t=0 rising linearly to 300 W at t=2: over [0.5, 1.5] the mean is 200 W -> 200 J
    points = [(0.0, 100.0), (1.0, 200.0), (2.0, 300.0)]
    assert window_energy(points, [(0.5, 1.5)], "power").joules == pytest.approx(200.0)
    assert window_energy(points, [(0.0, 2.0)], "power").joules == pytest.approx(400.0)


def test_a_sampling_gap_is_not_filled_and_too_little_coverage_is_not_measured():
    points = [(0.0, 100.0), (0.1, 100.0), (1.0, 100.0), (1.1, 100.0)]  # nothing between 0.1 and 1.0
    got = window_energy(points, [(0.0, 1.1)], "power", max_gap_s=0.5)
    assert got.covered_s == pytest.approx(0.2) and got.joules == pytest.approx(20.0)
    assert gaps(points, 0.5) == 1
    out = figures("power", points, [(0.0, 1.1)], None, 0.5, 1e-3, None, 1.0, None)
    assert "energy_j" not in out and "18% of the timed window" in out["reason"] and out["gaps"] == 1
    failed = [(0.0, 100.0), (0.5, None), (1.0, 100.0)]  # a failed reading is a gap too
    assert window_energy(failed, [(0.0, 1.0)], "power").covered_s == 0.0


def test_per_call_per_token_and_per_watt_figures_by_hand():
    points = [(0.0, 0.0), (10.0, 5000.0)]  # 500 W
    out = figures("counter", points, [(1.0, 3.0)], None, None, 0.02, {"tokens_per_s": 4000.0}, 250.0, 700.0)
    assert out["energy_j"] == pytest.approx(1000.0) and out["mean_power_w"] == pytest.approx(500.0)
    assert out["j_per_call"] == pytest.approx(10.0)  # 500 W x 0.02 s
    assert out["j_per_token"] == {"tokens": pytest.approx(0.125)}  # 500 / 4000
    assert out["tokens_per_s_per_w"] == {"tokens": pytest.approx(8.0)}
    assert out["tflops_per_w"] == pytest.approx(0.5) and out["power_limit_fraction"] == pytest.approx(500 / 700)
    inference = figures("counter", points, [(1.0, 3.0)], None, None, 0.02,
                        {"prompt_tokens_per_s": 1e4, "generated_tokens_per_s": 50.0}, None, None)
    assert inference["j_per_token"] == {"prompt_tokens": pytest.approx(0.05), "generated_tokens": pytest.approx(10.0)}
    assert figures("counter", points, [(1.0, 3.0)], None, None, 0.02, None, None, None)["j_per_token"] is None


def test_a_sustained_rows_energy_is_taken_from_its_steady_state_on():
    from xmfu.harness.results.statistics.energy import steady_intervals

    calls = [(10.0 + i, 10.5 + i) for i in range(6)]
    kept, said = steady_intervals(calls, {"reached": True, "reached_after_s": 3.0})
    assert kept == calls[3:] and said == "steady state: the calls from 3 s on"
    assert steady_intervals(calls, {"reached": False, "reached_after_s": 3.0}) == (calls, "every timed call")
    assert steady_intervals(calls, None)[0] == calls


def test_repeats_give_a_student_t_ci_carried_to_j_per_call_and_j_per_token():
    from xmfu.harness.results.statistics.energy import groups

    # three repeats of two calls each, drawing 100, 110 and 120 W: the counter climbs at that rate in each
    calls = [(0.0, 1.0), (1.0, 2.0), (10.0, 11.0), (11.0, 12.0), (20.0, 21.0), (21.0, 22.0)]
    points = [(0.0, 0.0), (2.0, 200.0), (10.0, 200.0), (12.0, 420.0), (20.0, 420.0), (22.0, 660.0)]
    parts = groups(calls, [0, 0, 1, 1, 2, 2], None)
    assert parts is not None and len(parts[0]) == 3 and parts[1] == "repeats"
    out = figures("counter", points, calls, None, None, 0.5, {"tokens_per_s": 1000.0}, None, None, parts)
    half = 4.303 * 10.0 / 3 ** 0.5  # t(0.975, 2) x sd / sqrt(n)
    assert out["mean_power_w"] == pytest.approx(110.0)
    assert out["mean_power_w_ci95"] == pytest.approx([110.0 - half, 110.0 + half])
    assert out["j_per_call_ci95"] == pytest.approx([(110.0 - half) * 0.5, (110.0 + half) * 0.5])
    assert out["j_per_token_ci95"]["tokens"] == pytest.approx([(110.0 - half) / 1000, (110.0 + half) / 1000])
    assert out["ci"].startswith("95% CI of mean power over the 3 repeats")
    assert groups(calls, [0] * 6, None) is None  # one measurement: point figures
    steady = {"reached": True, "reached_after_s": 10.0, "window_s": 10.0}
    assert groups(calls, None, steady) == ([calls[2:4], calls[4:]], "steady windows of 10 s")


def test_validate_keeps_only_the_readings_a_measured_row_needs():
    """telemetry.jsonl is streamed: a case without measured energy keeps nothing, a measured one two doubles a
    reading, its failed readings as gaps."""
    from xmfu.harness.results.rederive.energy import keep, wanted

    rows = [{"case_id": "a", "energy": {"source": "counter"}}, {"case_id": "b", "energy": {"source": "not measured"}},
            {"case_id": "c", "energy": {"source": "integrated power"}}, "not a row", {"case_id": 7,
                                                                                   "energy": {"source": "counter"}}]
    fields = wanted(rows)
    assert fields == {"a": "energy_j", "c": "power_w"}
    kept: dict = {}
    for reading in ({"case_id": "a", "t": 1.0, "energy_j": 5.0}, {"case_id": "b", "t": 1.0, "power_w": 9.0},
                    {"case_id": "c", "t": 2.0, "power_w": None}):
        keep(kept, fields, reading)
    assert set(kept) == {"a", "c"} and list(kept["a"][1]) == [5.0] and str(kept["c"][1][0]) == "nan"
