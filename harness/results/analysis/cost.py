"""What realized throughput costs: per million training tokens, per million prompt tokens (inference prefill)
and generated tokens (inference decode), per realized PFLOP-hour, and the price ratio at which a candidate
platform breaks even with a baseline.

A platform 20% cheaper per device-hour but with 40% less realized throughput costs 0.8/0.6 = 1.33x as much
per token: the break-even price ratio is the throughput ratio.
"""

from __future__ import annotations

import math
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


def break_even(throughput_ratio: float, price_ratio: float | None) -> dict[str, Any]:
    """The candidate is cheaper per unit of work while its price ratio stays below its throughput ratio."""
    out: dict[str, Any] = {"break_even_price_ratio": throughput_ratio}
    if price_ratio is not None:
        out["price_ratio"] = price_ratio
        out["cost_per_work_ratio"] = price_ratio / throughput_ratio
    return out
