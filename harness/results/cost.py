"""What realized throughput costs: per million training tokens, per realized PFLOP-hour, and the price ratio
at which a candidate platform breaks even with a baseline.

A platform 20% cheaper per device-hour but with 40% less realized throughput costs 0.8/0.6 = 1.33x as much
per token: the break-even price ratio is the throughput ratio.
"""

from __future__ import annotations

from typing import Any


def parse_prices(items: list[str]) -> dict[str, float]:
    """'DEVICE NAME=USD per device-hour' pairs (the device name as rows record it)."""
    prices = {}
    for item in items:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise ValueError(f"--price {item!r} is not DEVICE=USD_PER_HOUR")
        prices[name] = float(value)
    return prices


def load_prices(path: str) -> dict[str, float]:
    """A YAML mapping of device name (as rows record it) to USD per device-hour."""
    import yaml

    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
    except yaml.YAMLError as exc:  # a python/object tag, bad indentation: never executed, never a traceback
        first = " ".join(str(exc).split())[:200]
        raise ValueError(f"{path}: not a plain YAML mapping of prices ({first})") from None
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) and v > 0 for v in data.values()):
        raise ValueError(f"{path}: expected 'device name: USD per device-hour' lines with positive prices")
    return {str(k): float(v) for k, v in data.items()}


def cost_figures(row: dict[str, Any], price_per_device_hour: float | None) -> dict[str, Any]:
    """Per device: USD per 1e6 tokens (training rows) and USD per realized PFLOP-hour."""
    if not price_per_device_hour:
        return {}
    tokens_per_s = (row.get("throughput") or {}).get("tokens_per_s")
    tflops = row.get("tflops")
    return {"price_per_device_hour": price_per_device_hour,
            "usd_per_million_tokens": price_per_device_hour / (tokens_per_s * 3600) * 1e6 if tokens_per_s else None,
            "usd_per_realized_pflop_hour": price_per_device_hour / (tflops / 1e3) if tflops else None}


def break_even(throughput_ratio: float, price_ratio: float | None) -> dict[str, Any]:
    """The candidate is cheaper per unit of work while its price ratio stays below its throughput ratio."""
    out: dict[str, Any] = {"break_even_price_ratio": throughput_ratio}
    if price_ratio is not None:
        out["price_ratio"] = price_ratio
        out["cost_per_work_ratio"] = price_ratio / throughput_ratio
    return out
