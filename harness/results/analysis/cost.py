"""What realized throughput costs: per million training tokens, per million prompt tokens (inference prefill)
and generated tokens (inference decode), per realized PFLOP-hour, and the price ratio at which a candidate
platform breaks even with a baseline.

A platform 20% cheaper per device-hour but with 40% less realized throughput costs 0.8/0.6 = 1.33x as much
per token: the break-even price ratio is the throughput ratio.

Energy is its own line (`price_kwh=`, `pue=`): the row's measured device energy (its `energy` section) x PUE x the
price of a kWh. A rented device-hour usually includes its power: add the energy line to the device-hour line only
where power is paid apart, as an owner does (`ownership_price`: capex amortized over N years, then energy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from xmfu.harness.results.schema.row import Row


def parse_prices(items: list[str]) -> dict[str, float]:
    """'DEVICE NAME=USD per device-hour' pairs (the device name as rows record it)."""
    prices = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise ValueError(f"--price {item!r} is not DEVICE=USD_PER_HOUR")
        try:
            price = float(value)
        except ValueError:  # float's own message names neither the option nor what it allows
            price = math.nan
        if not math.isfinite(price) or price <= 0:  # a negative or infinite price makes every cost figure nonsense
            raise ValueError(f"--price {item!r}: {value!r} is not a price. Allowed: DEVICE=USD_PER_HOUR, a finite "
                             "number > 0")
        prices[name] = price
    return prices


def load_prices(path: str) -> dict[str, float]:
    """A YAML mapping of device name (as rows record it) to USD per device-hour."""
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except yaml.YAMLError as exc:  # a python/object tag, bad indentation: never executed, never a traceback
        first = " ".join(str(exc).split())[:200]
        raise ValueError(f"--prices {path}: not a plain YAML mapping of prices ({first})") from None
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                             and math.isfinite(v) and v > 0 for v in data.values()):
        raise ValueError(f"--prices {path}: expected 'device name: USD per device-hour' lines with finite prices > 0")
    return {str(k): float(v) for k, v in data.items()}


# throughput field a row carries -> the cost figure it gives. Inference rows say which tokens they count: a
# prefill row's prompt tokens, a decode row's generated tokens (all sequences of the batch).
PER_MILLION = {"tokens_per_s": "usd_per_million_tokens",
               "prompt_tokens_per_s": "usd_per_million_prompt_tokens",
               "generated_tokens_per_s": "usd_per_million_generated_tokens"}


def usd_per_million(price_per_device_hour: float, units_per_s: float | None) -> float | None:
    """USD per 1e6 units at a measured rate: the device-hour price over the units one device-hour makes."""
    return price_per_device_hour / (units_per_s * 3600) * 1e6 if units_per_s else None


def cost_figures(row: Row, price_per_device_hour: float | None) -> dict[str, Any]:
    """Per device: USD per 1e6 tokens (training rows), per 1e6 prompt tokens (inference prefill rows) or per 1e6
    generated tokens (inference decode rows), at the row's measured throughput, and USD per realized PFLOP-hour.
    `usd_per_million_tokens` is always present (null for rows without training tokens); the inference figures
    only for rows that carry their throughput."""
    if not price_per_device_hour:
        return {}
    throughput = row.throughput or {}
    tflops = row.tflops
    out: dict[str, Any] = {"price_per_device_hour": price_per_device_hour, "usd_per_million_tokens": None}
    for rate, name in PER_MILLION.items():
        if rate in throughput:
            out[name] = usd_per_million(price_per_device_hour, throughput[rate])
    out["usd_per_realized_pflop_hour"] = price_per_device_hour / (tflops / 1e3) if tflops else None
    return out


J_PER_KWH = 3.6e6
HOURS_PER_YEAR = 8760.0  # 365 days x 24 h


@dataclass(frozen=True)
class EnergyPrice:
    """USD per kWh at the meter, and the facility's PUE (total facility power / IT equipment power, The Green Grid's
    definition, so >= 1); None: not given, device energy priced alone."""

    usd_per_kwh: float
    pue: float | None = None

    @property
    def factor(self) -> float:
        return self.pue or 1.0


def energy_price(price_kwh: float | None, pue: float | None) -> EnergyPrice | None:
    """The checked pair, or None without price_kwh; raises ValueError naming the setting and what is allowed."""
    if pue is not None and (not math.isfinite(pue) or pue < 1):
        raise ValueError(f"pue={pue!r} is not a PUE. Allowed: a finite number >= 1 (total facility power / IT power)")
    if price_kwh is None:
        if pue is not None:
            raise ValueError("pue= without price_kwh=: a PUE prices nothing alone. Allowed: price_kwh=USD_PER_KWH "
                             "with it")
        return None
    if not math.isfinite(price_kwh) or price_kwh <= 0:
        raise ValueError(f"price_kwh={price_kwh!r} is not a price. Allowed: a finite number > 0 (USD per kWh)")
    return EnergyPrice(price_kwh, pue)


def ownership_price(capex_usd: float, years: float) -> float:
    """USD per device-hour of a device bought for `capex_usd` and written off evenly over `years` in use around the
    clock (straight-line amortization); energy comes on top, priced by EnergyPrice."""
    if not (math.isfinite(capex_usd) and capex_usd > 0 and math.isfinite(years) and years > 0):
        raise ValueError(f"ownership: capex {capex_usd!r} USD over {years!r} years. Allowed: both finite and > 0")
    return capex_usd / (years * HOURS_PER_YEAR)


def energy_cost(row: Row, price: EnergyPrice | None) -> dict[str, Any]:
    """The energy line: kWh and USD per 1e6 tokens of each kind the row measured J/token for, and USD of energy per
    realized PFLOP-hour. A PFLOP-hour at `tflops` takes 1000 / tflops device-hours at mean_power_w: mean_power_w /
    tflops kWh, i.e. 1 / tflops_per_w. {} without a price; each figure None where the row's energy is not measured."""
    if price is None:
        return {}
    e = row.energy
    out: dict[str, Any] = {"price_kwh": price.usd_per_kwh, "pue": price.pue,
                           "energy_source": e.source if e is not None else "not measured"}
    if price.pue is None:
        out["pue_note"] = "no pue= given: device energy alone, no cooling or facility overhead"
    for kind, j in ((e.j_per_token or {}) if e is not None else {}).items():
        kwh = j * 1e6 * price.factor / J_PER_KWH
        out[f"kwh_per_million_{kind}"] = kwh
        out[f"usd_energy_per_million_{kind}"] = kwh * price.usd_per_kwh
    per_w = e.tflops_per_w if e is not None else None
    out["usd_energy_per_realized_pflop_hour"] = price.factor * price.usd_per_kwh / per_w if per_w else None
    return out


def with_energy(row: Row, price_per_device_hour: float | None, price: EnergyPrice | None) -> dict[str, Any]:
    """cost_figures and the energy line, and their sums (usd_total_*) where both are there."""
    out = {**cost_figures(row, price_per_device_hour), **energy_cost(row, price)}
    for name in [k for k in out if k.startswith("usd_energy_per_")]:
        hourly = out.get(name.replace("usd_energy_per_", "usd_per_"))
        if hourly is not None and out[name] is not None:
            out[name.replace("usd_energy_per_", "usd_total_per_")] = hourly + out[name]
    return out


def energy_verdict(cand: dict[str, Any], base: dict[str, Any]) -> str:
    """J/token of a candidate against its baseline: `less energy` or `more energy` where both 95% CIs exist and do
    not overlap, `not different` where they overlap, else why there is no verdict (point figures say nothing of
    their noise, so two of them are never called different)."""
    a, b = cand.get("j_per_token_ci95"), base.get("j_per_token_ci95")
    if cand.get("j_per_token") is None or base.get("j_per_token") is None:
        return "no verdict: J/token not measured on both sides"
    if not (a and b):
        return "no verdict: J/token is a point figure on one side (repeats=N gives a CI)"
    if a[1] < b[0]:
        return "less energy"
    return "more energy" if a[0] > b[1] else "not different"


def break_even(throughput_ratio: float, price_ratio: float | None) -> dict[str, Any]:
    """The candidate is cheaper per unit of work while its price ratio stays below its throughput ratio."""
    out: dict[str, Any] = {"break_even_price_ratio": throughput_ratio}
    if price_ratio is not None:
        out["price_ratio"] = price_ratio
        out["cost_per_work_ratio"] = price_ratio / throughput_ratio
    return out
