"""How much does xmfu's measurement itself cost? Its matmul figure against two other ways of timing the same call.

    python benchmarks/harness_overhead.py [--size 2048] [--dtype fp32 bf16] [--rounds 5]

Three methods time the same torch.matmul on the same inputs, in the same process, interleaved in rotating
order (xmfu, bare, timer; bare, timer, xmfu; ...) over several rounds, so drift is shared:
- xmfu: `xmfu.benchmark` (the engine, its sampler and stop rule, a bundle written to a temporary folder);
- bare: a `perf_counter` loop around each call, nothing else;
- timer: `torch.utils.benchmark.Timer.blocked_autorange`, with `num_threads` set to torch's thread count.
Prints each method's median TFLOP/s per round and, per ratio (xmfu/bare, xmfu/timer), its median and range over
the rounds. A ratio near 1.0 means the harness adds nothing measurable. Nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SECONDS = 3.0  # per method per round


def operands(size: int, dtype: str):
    import torch

    from xmfu.harness.machine.frameworks import to_torch
    from xmfu.workloads.matmul.spec import MatmulCase

    torch.set_float32_matmul_precision("highest")
    case = MatmulCase(size, size, size, dtype)
    a, b = (to_torch(x, dtype, "cpu") for x in case.stored_inputs())
    return a, b, case.flops()


def bare(a, b, flops: float) -> float:
    import torch

    times, start = [], time.perf_counter()
    while time.perf_counter() - start < SECONDS or len(times) < 10:
        t0 = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - t0)
    return flops / statistics.median(times) / 1e12


def torch_timer(a, b, flops: float) -> float:
    import torch
    from torch.utils import benchmark

    timer = benchmark.Timer("torch.matmul(a, b)", globals={"a": a, "b": b, "torch": torch},
                            num_threads=torch.get_num_threads())
    return flops / timer.blocked_autorange(min_run_time=SECONDS).median / 1e12


def with_xmfu(a, b, flops: float, dtype: str, folder: str) -> float:
    import torch

    import xmfu

    result = xmfu.benchmark({"torch": lambda: torch.matmul(a, b)}, reference=lambda: a.double() @ b.double(),
                            flops=flops, dtype=dtype, tolerance=1.0, results_dir=folder,
                            timing={"max_time_s": SECONDS, "warmup_s": 0.3, "target_rel_ci": 0.002})
    return result.rows[0]["tflops"]


def run(size: int, dtype: str, rounds: int, folder: str) -> list[str]:
    a, b, flops = operands(size, dtype)
    methods = {"xmfu": lambda: with_xmfu(a, b, flops, dtype, folder), "bare": lambda: bare(a, b, flops),
               "timer": lambda: torch_timer(a, b, flops)}
    names = list(methods)
    figures: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % 3:] + names[: r % 3]:
            figures[name].append(methods[name]())
    lines = [f"{dtype} {size}^3, {rounds} rounds x {SECONDS:g} s per method, rotating order:"]
    lines += [f"  {n:5} TFLOP/s per round: " + ", ".join(f"{v:.4g}" for v in figures[n]) for n in names]
    for other in ("bare", "timer"):
        ratios = [x / y for x, y in zip(figures["xmfu"], figures[other], strict=True)]
        lines.append(f"  xmfu/{other}: median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-"
                     f"{max(ratios):.3f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--dtype", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--rounds", type=int, default=5)
    ns = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    with tempfile.TemporaryDirectory(prefix="xmfu-overhead-") as folder:
        for dtype in ns.dtype:
            print("\n".join(run(ns.size, dtype, ns.rounds, folder)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
