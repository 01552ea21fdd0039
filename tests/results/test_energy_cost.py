"""The cost's energy line (price_kwh=, pue=) and the ownership mode, worked by hand (analysis/cost.py)."""

from __future__ import annotations

import pytest

from tests.results.rows import valid_row
from xmfu.harness.results.analysis.cost import (
    EnergyPrice,
    energy_cost,
    energy_price,
    ownership_price,
    with_energy,
)
from xmfu.harness.results.bundle.reader import typed


def _row(**energy):
    section = {"source": "counter", "scope": "device", "mean_power_w": 500.0, **energy}
    return typed(valid_row(tflops=400.0, throughput={"tokens_per_s": 10_000.0}, energy=section))


def test_the_energy_line_by_hand():
    # 0.05 J/token: 1e6 tokens take 5e4 J = 0.013889 kWh; x PUE 1.2 x USD 0.10 per kWh
    row = _row(j_per_token={"tokens": 0.05}, tflops_per_w=0.8)
    out = energy_cost(row, EnergyPrice(0.10, 1.2))
    assert out["kwh_per_million_tokens"] == pytest.approx(5e4 * 1.2 / 3.6e6)
    assert out["usd_energy_per_million_tokens"] == pytest.approx(5e4 * 1.2 / 3.6e6 * 0.10)
    # a PFLOP-hour at 0.8 TFLOP/s/W draws 1 / 0.8 kWh of the device: 1.25 x 1.2 x 0.10 USD
    assert out["usd_energy_per_realized_pflop_hour"] == pytest.approx(1.25 * 1.2 * 0.10)
    assert "pue_note" not in out and "no pue=" in energy_cost(row, EnergyPrice(0.10))["pue_note"]


def test_totals_add_the_device_hour_line_and_the_energy_line():
    row = _row(j_per_token={"tokens": 0.05}, tflops_per_w=0.8)
    out = with_energy(row, 3.6, EnergyPrice(0.10))
    # USD 3.6 per device-hour at 1e4 tokens/s: 3.6 / 3.6e7 x 1e6 = USD 0.1 per million tokens
    assert out["usd_per_million_tokens"] == pytest.approx(0.1)
    assert out["usd_total_per_million_tokens"] == pytest.approx(0.1 + 5e4 / 3.6e6 * 0.10)
    assert out["usd_total_per_realized_pflop_hour"] == pytest.approx(3.6 / 0.4 + 0.125)


def test_a_row_without_measured_energy_has_no_energy_cost():
    row = typed(valid_row(tflops=400.0, energy={"source": "not measured", "scope": "cpu package",
                                                "reason": "no RAPL"}))
    out = with_energy(row, None, EnergyPrice(0.10))
    assert out["energy_source"] == "not measured" and out["usd_energy_per_realized_pflop_hour"] is None
    assert not any(k.startswith("usd_total") for k in out)


def test_bad_energy_prices_and_ownership_are_refused_with_what_is_allowed():
    with pytest.raises(ValueError, match="Allowed: a finite number >= 1"):
        energy_price(0.1, 0.8)
    with pytest.raises(ValueError, match="without price_kwh"):
        energy_price(None, 1.3)
    with pytest.raises(ValueError, match="USD per kWh"):
        energy_price(-1.0, None)
    assert energy_price(None, None) is None
    assert ownership_price(30_000.0, 4.0) == pytest.approx(30_000 / (4 * 8760))
    with pytest.raises(ValueError, match="Allowed"):
        ownership_price(30_000.0, 0.0)


def test_suite_settings_take_the_ownership_mode_and_the_energy_price():
    from xmfu.harness.engine.declare import ConfigError
    from xmfu.harness.suites import suite

    s = suite._settings({"capex_usd": 30_000, "amortize_years": 4, "price_kwh": 0.1, "pue": 1.3})
    assert s.price == pytest.approx(30_000 / (4 * 8760)) and s.price_source.startswith("ownership")
    assert s.energy == EnergyPrice(0.1, 1.3)
    for bad, field in (({"capex_usd": 30_000}, "capex_usd"), ({"pue": 1.2}, "pue"),
                       ({"capex_usd": 1, "amortize_years": 1, "price": 2}, "capex_usd")):
        with pytest.raises(ConfigError) as got:
            suite._settings(bad)
        assert got.value.field == field and str(got.value).count("Allowed") == 1


def test_a_j_per_token_verdict_needs_a_ci_on_both_sides():
    from xmfu.harness.results.analysis.cost import energy_verdict

    def side(j, ci=None):
        return {"j_per_token": j, "j_per_token_ci95": ci}

    assert energy_verdict(side(0.10, [0.09, 0.11]), side(0.20, [0.18, 0.22])) == "less energy"
    assert energy_verdict(side(0.20, [0.18, 0.22]), side(0.10, [0.09, 0.11])) == "more energy"
    assert energy_verdict(side(0.10, [0.08, 0.19]), side(0.20, [0.18, 0.22])) == "not different"
    assert energy_verdict(side(0.10), side(0.20, [0.18, 0.22])).startswith("no verdict: J/token is a point figure")
    assert energy_verdict(side(None), side(0.20)).startswith("no verdict: J/token not measured")


def test_the_verdicts_training_line_gives_j_per_token_or_why_not_and_the_energy_cost():
    from xmfu.harness.suites.suite_report import _training_line

    measured = {"backend": "torch", "mfu": 0.4, "tokens_per_s": 1e4, "energy_source": "counter", "j_per_token": 0.05,
                "tokens_per_s_per_w": 20.0, "price_kwh": 0.12, "pue": 1.3, "usd_energy_per_million_tokens": 0.0021}
    line = _training_line("n1", measured, None)
    assert "0.05 J/token, 20 tokens/s/W (device, counter)" in line
    assert "energy USD 0.0021 per million tokens at USD 0.12/kWh, PUE 1.3" in line
    unmeasured = {**measured, "j_per_token": None, "energy_source": "not measured", "energy_reason": "no RAPL",
                  "usd_energy_per_million_tokens": None}
    line = _training_line("n1", unmeasured, 3.5)
    assert "energy not measured (no RAPL)" in line and "no energy cost at USD 0.12/kWh, PUE 1.3" in line
