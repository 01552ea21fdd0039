"""The cost of the statistics: `xmfu compare` of two bundles of 4,000 rows each (the goal: under 5 s).

    python benchmarks/compare_speed.py [--rows 4000] [--samples 100]

Writes two synthetic bundles (the real writer, rows shaped like matmul rows, `--samples` raw samples each) to a
temporary folder, then times `xmfu compare A B --format json` as a user runs it (a fresh process, validation
included) and the comparison alone in this process. Prints both in seconds of wall time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xmfu.harness.results.analysis.compare import Side, compare  # noqa: E402
from xmfu.harness.results.bundle.validator import load_bundle  # noqa: E402
from xmfu.harness.results.bundle.writer import BundleWriter  # noqa: E402

FIELDS = {"workload": "matmul", "dtype": "bf16", "flop_convention": "matmul-2mnk/1",
          "protocol": {"protocol": "xmfu.timing/1", "statistic": "median", "cold_cache": False, "sustained": False}}


def write(folder: Path, name: str, rows: int, samples: int, scale: float) -> Path:
    rng = np.random.default_rng(len(name))
    writer = BundleWriter(folder / name, {"run_id": name, "created": "2026-11-23T00:00:00Z", "xmfu_version": "0",
                                          "git_sha": None, "argv": [], "overrides": [], "comparability_key": "k"},
                          "", {"packages": {}})
    for i in range(rows):
        values = scale * (1e-3 + 1e-6 * i) * (1 + 0.02 * rng.standard_normal(samples))
        median = float(np.median(values))
        fields = {**FIELDS, "params": {"m": i}}
        time_s = {"n": samples, "median": median, "mean": float(values.mean()), "min": float(values.min()),
                  "max": float(values.max()), "ci95_low": float(np.quantile(values, 0.4)),
                  "ci95_high": float(np.quantile(values, 0.6)), "cv": float(values.std() / values.mean())}
        row = {"run_id": name, "case_id": f"matmul-bf16-{i}", "workload": "matmul", "backend": "torch",
               "platform": "cpu", "device": "CPU", "dtype": "bf16", "params": {"m": i}, "status": "ok", "reason": None,
               "flops": 1e9, "flop_convention": "matmul-2mnk/1", "bytes": 0, "time_s": time_s,
               "tflops": 1e9 / median / 1e12, "peak_tflops": 1.0, "peak_source": "s", "mfu": 1e9 / median / 1e12,
               "mfu_vs_achievable": None, "timing_valid": True, "comparability_key": f"k{i}", "comparability": fields}
        writer.append(row, {"case_id": row["case_id"], "backend": "torch", "samples": values.tolist(),
                            "rounds": [j // 5 for j in range(samples)]})
    writer.finalize("complete")
    return folder / name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--samples", type=int, default=100)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="xmfu-compare-speed-") as tmp:
        start = time.perf_counter()
        a, b = (write(Path(tmp), n, ns.rows, ns.samples, s) for n, s in (("a", 1.0), ("b", 0.97)))
        print(f"wrote two bundles of {ns.rows} rows x {ns.samples} samples in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        loaded = [load_bundle(x) for x in (a, b)]
        assert not any(x.problems for x in loaded), [x.problems[:3] for x in loaded]
        print(f"validate and read both (in-process): {time.perf_counter() - start:.2f} s")
        start = time.perf_counter()
        result = compare([Side([x.bundle]) for x in loaded])
        print(f"compare statistics (in-process): {time.perf_counter() - start:.2f} s, {len(result.rows)} rows")
        start = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-m", "xmfu", "compare", str(a), str(b), "--format", "json"],
                              capture_output=True, text=True, env=env, check=False)
        print(f"xmfu compare A B --format json (fresh process, validation included): "
              f"{time.perf_counter() - start:.2f} s, exit {proc.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
