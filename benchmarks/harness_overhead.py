"""How much does xmfu's measurement itself cost? Its matmul figure vs a bare loop in the same process.

    python benchmarks/harness_overhead.py [--size 2048] [--dtype fp32 bf16] [--results-dir results]

Runs `xmfu run workload=matmul backends=[torch]` in-process (writing a normal bundle), then times the same
torch.matmul on the same inputs with nothing but perf_counter around each call, and prints the ratio of the
two medians' TFLOP/s. A ratio near 1.0 means the harness adds nothing measurable.
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness.config import parse_run_config
from harness.hydra_app import compose_job
from harness.results.reader import read_bundle
from harness.run import execute
from workloads.catalog import build_registry
from workloads.matmul.spec import MatmulCase


def bare_loop_tflops(case: MatmulCase, seconds: float) -> tuple[float, int]:
    import torch

    from harness.machine.frameworks import to_torch

    torch.set_float32_matmul_precision("highest")
    a, b = (to_torch(x, case.dtype, "cpu") for x in case.stored_inputs())
    for _ in range(3):
        torch.matmul(a, b)
    times, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or len(times) < 10:
        t0 = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - t0)
    return case.flops() / statistics.median(times) / 1e12, len(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--dtype", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--seconds", type=float, default=10.0, help="bare-loop sampling time per dtype")
    ns = parser.parse_args()
    registry = build_registry()
    for dtype in ns.dtype:
        overrides = ["backends=[torch]", f"dtype={dtype}", f"workload.sizes=[{ns.size}]",
                     f"results_dir={ns.results_dir}"]
        data, text = compose_job(overrides)
        cfg = parse_run_config(data, registry.backends_by_workload())
        outcome = execute(cfg, registry, text, ["benchmarks/harness_overhead.py"], overrides)
        row = read_bundle(outcome.bundle).cases[0]
        bare, n = bare_loop_tflops(MatmulCase(ns.size, ns.size, ns.size, dtype, seed=cfg.seed), ns.seconds)
        print(f"{dtype} {ns.size}^3: xmfu {row['tflops']:.4f} TFLOP/s (n={row['time_s']['n']}, "
              f"MFU {row['mfu']:.3f} of {row['peak_tflops']:.4f}), bare loop {bare:.4f} TFLOP/s (n={n}), "
              f"ratio xmfu/bare {row['tflops'] / bare:.4f}")


if __name__ == "__main__":
    main()
