"""fp32 128^3 torch matmul on the CPU with JAX imported and active in the same process, under the OpenMP runtime's
default wait policy and under the OMP_WAIT_POLICY=PASSIVE that xmfu sets (harness/machine/threads.py; issue 30
item 8). Prints medians; writes nothing.

    .venv/bin/python benchmarks/cpu_threads.py [--rounds 3]

Each configuration runs in its own process (OpenMP reads the policy once, when torch loads it), in alternating
rounds so that the host's other load falls on both alike. Per process: the torch matmul alone, then in blocks of
5 calls alternating with 5 calls of the same matmul in JAX (jit, block_until_ready), as a shoot-out interleaves
backends. The figures in docs/measurement.md were measured with this script on the 2-core development host.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, time
import numpy as np, torch, jax, jax.numpy as jnp
a, b = torch.randn(128, 128), torch.randn(128, 128)
ja, jb = jnp.ones((128, 128)), jnp.ones((128, 128))
f = jax.jit(lambda x, y: x @ y)
def torch_calls(n):
    out = []
    for _ in range(n):
        t = time.perf_counter(); a @ b; out.append(time.perf_counter() - t)
    return out
def jax_calls(n):
    out = []
    for _ in range(n):
        t = time.perf_counter(); f(ja, jb).block_until_ready(); out.append(time.perf_counter() - t)
    return out
torch_calls(50); jax_calls(50)
alone = float(np.median(torch_calls(400)))
mixed_t, mixed_j = [], []
for _ in range(80):
    mixed_j += jax_calls(5); mixed_t += torch_calls(5)
print(json.dumps({"alone": alone, "with_jax": float(np.median(mixed_t)), "jax": float(np.median(mixed_j)),
                  "threads": torch.get_num_threads()}))
"""

CONFIGS = {"runtime default (OMP_WAIT_POLICY unset)": None, "OMP_WAIT_POLICY=PASSIVE (xmfu)": "PASSIVE"}


def one(policy: str | None) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "XMFU_THREADS_SET")}
    env["JAX_PLATFORMS"] = "cpu"
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="processes per configuration, alternating")
    rounds = parser.parse_args().rounds
    results: dict[str, list[dict[str, float]]] = {name: [] for name in CONFIGS}
    for _ in range(rounds):
        for name, policy in CONFIGS.items():
            results[name].append(one(policy))
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"fp32 128x128x128 torch matmul, median ms per call over {rounds} processes each "
          f"({os.cpu_count()} CPUs, load average {' '.join(load)} at the end)")
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) * 1e3 for k in ("alone", "with_jax", "jax")}
        print(f"  {name:40s} torch alone {med['alone']:.3f}  torch between JAX calls {med['with_jax']:.3f}  "
              f"(JAX's own {med['jax']:.3f}; torch threads {runs[0]['threads']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
