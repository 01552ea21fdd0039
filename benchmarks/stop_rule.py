"""The stop rule's own cost: samples taken per second of budget, with the order-statistic rule xmfu uses and with
the per-round 1,000-resample bootstrap it replaced (the goal: at least 1.5x more samples, no wider final CI).

    python benchmarks/stop_rule.py [--size 128] [--budget 10] [--rounds 3]

Runs a fixed torch matmul with `timing=default`, except a CI target no run can reach (so every run spends its
whole `max_time_s` sampling), alternating the two rules over several rounds in this process. The final
figure's CI is the same bootstrap for both; only the rule checked after every round differs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xmfu.harness.engine import sampler  # noqa: E402


def bootstrap_rule(samples: list[float]) -> float:
    """The replaced rule: a 1,000-resample bootstrap of every sample so far, recomputed after each round."""
    import numpy as np

    x = np.asarray(samples)
    rng = np.random.default_rng(0)
    medians = np.median(x[rng.integers(0, x.size, size=(1000, x.size))], axis=1)
    low, high = np.quantile(medians, [0.025, 0.975])
    return float((high - low) / 2 / np.median(x))


def one_run(size: int, budget: float, folder: str) -> tuple[int, float]:
    import torch

    import xmfu

    a, b = torch.rand(size, size), torch.rand(size, size)
    result = xmfu.benchmark({"torch": lambda: a @ b}, reference=lambda: a.double() @ b.double(),
                            flops=2 * size**3, tolerance=1e-4, results_dir=folder,
                            timing={"max_time_s": budget, "target_rel_ci": 1e-9, "max_samples": 100000})
    t = result.rows[0]["time_s"]
    return t["n"], (t["ci95_high"] - t["ci95_low"]) / 2 / t["median"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    ns = parser.parse_args()
    rules = {"order-statistic (xmfu)": sampler.rel_half_width, "bootstrap per round (before)": bootstrap_rule}
    found: dict[str, list[tuple[int, float]]] = {name: [] for name in rules}
    with tempfile.TemporaryDirectory(prefix="xmfu-stop-rule-") as folder:
        for r in range(ns.rounds):
            for name in (list(rules) if r % 2 == 0 else list(rules)[::-1]):
                sampler.rel_half_width = rules[name]
                found[name].append(one_run(ns.size, ns.budget, folder))
    print(f"matmul {ns.size}^3 fp32, max_time_s={ns.budget:g}, {ns.rounds} rounds each, alternating:")
    for name, runs in found.items():
        rate = statistics.median(n / ns.budget for n, _ in runs)
        ci = statistics.median(c for _, c in runs)
        print(f"  {name:30} {rate:8.1f} samples per second of budget, final CI half-width {100 * ci:.3f}%")
    new, old = (statistics.median(n for n, _ in found[k]) for k in rules)
    print(f"samples ratio (order-statistic / bootstrap): {new / old:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
