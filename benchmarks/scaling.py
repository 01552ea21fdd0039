"""Data-parallel scaling of the training step on one node: DDP and FSDP against the single-device step.

    python benchmarks/scaling.py [--gpus 8] [--model 1b] [--batch 8] [--seq-len 2048] [--out DIR]
    python benchmarks/scaling.py --cpu          # 2 gloo processes, tiny model: proves the plumbing only

Runs `xmfu run workload=transformer workload.parallel=[ddp,fsdp]` under torchrun (one process per GPU, bf16,
weak scaling) and prints, for each strategy, the scaling efficiency (MFU per device / the single-device
step's MFU, both timed in the same run) against the goals: DDP >= 0.95 and FSDP >= 0.90 for the 1b preset on
8 GPUs, with the exposed communication, the overlap and the bandwidth each rank's collectives reached. Exit
status 0 when every goal is met, 1 when one is missed or a row did not run, 2 when the run itself failed.
Not measured yet: the sessions that wrote it had no GPU (see docs/distributed.md, "Commands").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xmfu.harness.results.bundle.reader import read_bundle  # noqa: E402

GOALS = {"ddp": 0.95, "fsdp": 0.90}  # scaling efficiency on 8 GPUs, 1b preset (docs/distributed.md)


def command(args: argparse.Namespace) -> list[str]:
    nproc = 2 if args.cpu else args.gpus
    run = ["workload=transformer", "backends=[torch]", "workload.parallel=[ddp,fsdp]", "workload.scaling=weak",
           f"results_dir={args.out}", f"workload.samples={args.samples}"]
    if args.cpu:
        run += ["model=tiny", "dtype=fp32", "device=cpu", "timing=quick"]
    else:
        run += [f"model={args.model}", "dtype=bf16", "device=gpu", f"workload.batch={args.batch}",
                f"model.seq_len={args.seq_len}"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "xmfu", "run", *run]


def _pct(x: float | None) -> str:
    return "not measured" if x is None else f"{100 * x:.2f}%"


def _ms(x: float | None) -> str:
    return "not measured" if x is None else f"{x * 1e3:.4g} ms"


def report(rows: list[dict], cpu: bool) -> int:
    """One line per strategy; 1 when a goal is missed (never on a CPU, where the figure means nothing)."""
    status = 0
    for row in rows:
        strategy = row["params"].get("parallel")
        if not strategy:
            median = (row.get("time_s") or {}).get("median")
            print(f"single device: {row['status']}, MFU {_pct(row.get('mfu'))}, step {_ms(median)}")
            continue
        if row["status"] != "ok" or row.get("scaling_efficiency") is None:
            print(f"{strategy}: {row['status']} {row.get('reason') or row.get('scaling_note')}")
            status = 1
            continue
        eff, goal = row["scaling_efficiency"], GOALS[strategy]
        met = eff >= goal
        print(f"{strategy}: scaling efficiency {eff:.3f} (goal >= {goal:.2f}: {'met' if met else 'MISSED'}), "
              f"MFU/device {_pct(row['mfu'])}, world {row['params']['world_size']}, exposed comm "
              f"{_ms(row['comm_exposed_s'])} of {_ms(row['comm_total_s'])} alone, overlap {row['overlap']:.2f}"
              f"{' (clamped)' if (row.get('comm') or {}).get('clamped') else ''}, "
              f"{row['comm_achieved_gbps']:.3g} GB/s per rank")
        status = status or (0 if met or cpu else 1)
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--model", default="1b")
    parser.add_argument("--batch", type=int, default=8, help="sequences per device (weak scaling)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "results" / "scaling"))
    parser.add_argument("--cpu", action="store_true", help="2 gloo processes, tiny model (plumbing only)")
    args = parser.parse_args()
    proc = subprocess.run(command(args), cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
    lines = proc.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("bundle: "):
        print(proc.stderr[-3000:], file=sys.stderr)
        return 2
    bundle = read_bundle(Path(lines[-1].removeprefix("bundle: ")))
    print(lines[-1])
    return report(bundle.raw_rows, args.cpu)


if __name__ == "__main__":
    sys.exit(main())
