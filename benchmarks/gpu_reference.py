"""`make gpu-reference`: the GPU reference set in one command, at most 25 minutes on one GPU.

    python benchmarks/gpu_reference.py [--out DIR] [--smoke] [--budget-min 25]

Parts: mamf (bf16; fp8 where the device has it) with torch vs Triton vs JAX matmul at 4096^3 and 8192^3, the
attention shoot-out at FlashAttention's benchmark shapes, the `1b` training step on every backend, inference
(prefill and decode) of the `1b` and `8b` presets, and the collectives over the GPUs present (torchrun, one
rank per GPU; JAX over all devices). Each part is one `xmfu run` with its own time limit (a part that runs out
is stopped with SIGTERM and keeps a `partial` bundle). Writes the bundles, one HTML report and `summary.md`
under `results/reference/<device>/`.

Without an accelerator it runs every part at smoke sizes (to prove the plumbing) into a temporary folder,
never into results/reference/, and lists the rows that need a GPU with the reasons the backends gave.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xmfu.harness.results.reader import read_bundle  # noqa: E402
from xmfu.harness.results.validator import validate_bundle  # noqa: E402


@dataclass(frozen=True)
class Part:
    name: str
    args: tuple[str, ...]  # `xmfu run` overrides on a GPU
    smoke: tuple[str, ...]  # added without an accelerator: sizes that finish in seconds
    minutes: float  # share of the 25-minute budget
    ranks: str = ""  # "gpus": under torchrun, one process per GPU (two gloo processes on a CPU)
    what: str = ""


PARTS = (
    Part("mamf-bf16", ("experiment=mamf", "dtype=bf16"),
         ("mamf.m=[128,256]", "mamf.n=[256]", "mamf.k=[256]", "workload.sizes=[128]", "timing=quick"), 6,
         what="maximum achievable bf16 matmul, then torch vs Triton vs JAX at 4096^3 and 8192^3"),
    Part("mamf-fp8", ("experiment=mamf", "dtype=fp8", "backends=[torch]"),
         ("mamf.m=[128]", "mamf.n=[128]", "mamf.k=[128]", "workload.sizes=[128]", "timing=quick"), 2,
         what="maximum achievable fp8 matmul (torch._scaled_mm; sm89+ and gfx942+ only)"),
    Part("attention", ("experiment=attention-shootout",),
         ("workload.batch_seq=[[1,48]]", "workload.model_dim=128", "workload.head_dim=[64]", "timing=quick"), 7,
         what="attention shoot-out at FlashAttention's benchmark shapes, speedups vs SDPA"),
    Part("transformer-1b", ("workload=transformer", "model=1b", "dtype=bf16"), ("model=tiny", "timing=quick"), 5,
         what="one training step of the 1b preset on every backend"),
    Part("inference-1b", ("workload=inference", "model=1b", "dtype=bf16", "workload.batch=[1,16,64]"),
         ("model=tiny", "scale=smoke", "timing=quick"), 3,
         what="prefill (TTFT, MFU) and decode (TPOT, MBU) of the 1b preset on every backend"),
    Part("inference-8b", ("workload=inference", "model=8b", "dtype=bf16", "workload.batch=[1,16]",
                          "backends=[torch,torch_compile,jax]"),
         ("model=tiny", "scale=smoke", "timing=quick"), 3,
         what="prefill and decode of the 8b preset (Triton left out to fit the budget)"),
    Part("collectives-torch", ("workload=collectives", "backends=[torch_dist]"), ("scale=smoke",), 2, ranks="gpus",
         what="collectives over the GPUs present through torch.distributed"),
    Part("collectives-jax", ("workload=collectives", "backends=[jax]"), ("scale=smoke",), 1,
         what="collectives over every device through JAX"),
)


@dataclass
class Outcome:
    part: Part
    exit_code: int | None
    seconds: float
    bundles: list[Path] = field(default_factory=list)
    note: str = ""


def accelerator() -> tuple[str, int, bool]:
    """(device name, device count, is an accelerator) as xmfu detects them."""
    from xmfu.harness.machine.platform import detect

    plat = detect()
    return plat.device.name, len(plat.devices), plat.has_accelerator


def slug(name: str, count: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + f"-x{count}"


def command(part: Part, results: Path, smoke: bool, gpus: int) -> list[str]:
    xmfu = [sys.executable, "-m", "xmfu", "run", *part.args, *(part.smoke if smoke else ()),
            f"results_dir={results}"]
    if part.ranks != "gpus":
        return xmfu
    nproc = 2 if smoke else max(gpus, 1)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *xmfu[1:]]


def run_part(part: Part, results: Path, smoke: bool, gpus: int, budget_s: float) -> Outcome:
    results.mkdir(parents=True, exist_ok=True)
    before = set(results.iterdir())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if part.name == "collectives-jax" and smoke:
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    start = time.perf_counter()
    proc = subprocess.Popen(command(part, results, smoke, gpus), cwd=ROOT, env=env, start_new_session=True)
    note = ""
    try:
        code = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # finished cases are kept: the bundle closes as `partial`
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        note = f"stopped at its {budget_s / 60:.0f}-minute share of the budget"
    bundles = sorted(p for p in set(results.iterdir()) - before if (p / "manifest.json").exists())
    return Outcome(part, code, time.perf_counter() - start, bundles, note)


def _inference_figure(rows: list[dict]) -> str:
    """Per backend: the best prefill MFU and the best decode throughput with its MBU."""
    parts = []
    for backend in sorted({r["backend"] for r in rows}):
        mine = [r for r in rows if r["backend"] == backend and r["status"] == "ok" and r.get("timing_valid")]
        prefill = max((r for r in mine if r["params"]["phase"] == "prefill"), key=lambda r: r["tflops"] or 0,
                      default=None)
        decode = max((r for r in mine if r["params"]["phase"] == "decode"),
                     key=lambda r: r["throughput"]["generated_tokens_per_s"], default=None)
        if prefill:
            mfu = "MFU not measured" if prefill.get("mfu") is None else f"MFU {100 * prefill['mfu']:.1f}%"
            parts.append(f"{backend} prefill {mfu} (b{prefill['params']['batch']})")
        if decode:
            mbu = "MBU not measured" if decode.get("mbu") is None else f"MBU {100 * decode['mbu']:.1f}%"
            parts.append(f"{backend} decode {decode['throughput']['generated_tokens_per_s']:.4g} tok/s, {mbu} "
                         f"(b{decode['params']['batch']})")
    return "; ".join(parts) or "no timed row"


def _figure(rows: list[dict]) -> str:
    """The headline of a bundle: best TFLOP/s and MFU per backend, or peak busbw."""
    if rows and rows[0].get("workload") == "inference":
        return _inference_figure(rows)
    best: dict[str, dict] = {}
    for r in rows:
        if r["status"] != "ok" or not r.get("timing_valid"):
            continue
        key = "busbw_gbps" if r.get("busbw_gbps") is not None else "tflops"
        if r.get(key) is not None and r.get(key) > (best.get(r["backend"], {}).get(key) or 0):
            best[r["backend"]] = r
    parts = []
    for backend, r in sorted(best.items()):
        if r.get("busbw_gbps") is not None:
            parts.append(f"{backend} peak busbw {r['busbw_gbps']:.3g} GB/s ({r['params']['op']})")
        else:
            mfu = "MFU not measured" if r.get("mfu") is None else f"MFU {100 * r['mfu']:.1f}%"
            parts.append(f"{backend} {r['tflops']:.3g} TFLOP/s ({mfu}, {r['case_id']})")
    return "; ".join(parts) or "no timed row"


def summary(outcomes: list[Outcome], device: str, smoke: bool) -> str:
    lines = [f"# xmfu GPU reference set: {device}", "",
             "Smoke sizes on a machine without an accelerator: these figures prove the plumbing only." if smoke
             else "Every figure below comes from the bundle named beside it.", "",
             "| part | what | exit | minutes | bundle | best per backend |", "|---|---|---|---|---|---|"]
    needs: dict[str, set[str]] = {}
    for o in outcomes:
        for b in o.bundles or [None]:
            rows = read_bundle(b).cases if b else []
            for r in rows:
                if r["status"] in ("skipped", "failed"):
                    needs.setdefault(f"{o.part.name}: {r['backend']}", set()).add(r["reason"] or r["status"])
            lines.append(f"| {o.part.name} | {o.part.what} | {o.exit_code} {o.note} | {o.seconds / 60:.1f} | "
                         f"{b.name if b else 'none'} | {_figure(rows) if b else 'not measured'} |")
    if needs:
        lines += ["", "Rows that did not run here, with the reason each backend gave:", ""]
        lines += [f"- {k}: {'; '.join(sorted(v))[:300]}" for k, v in sorted(needs.items())]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="output folder (default: results/reference/<device> on an accelerator)")
    parser.add_argument("--smoke", action="store_true", help="smoke sizes even on an accelerator")
    parser.add_argument("--budget-min", type=float, default=25.0)
    ns = parser.parse_args()
    name, count, has_accelerator = accelerator()
    smoke = ns.smoke or not has_accelerator
    device = slug(name, count)
    default = ROOT / "results" / "reference" / device if not smoke else (
        Path(tempfile.gettempdir()) / "xmfu-gpu-reference-smoke" / device)
    out = Path(ns.out) if ns.out else default
    if smoke and out.exists() and not ns.out:
        shutil.rmtree(out)
    print(f"gpu-reference: {name} x{count}, {'SMOKE sizes (no accelerator)' if smoke else 'full sizes'}, "
          f"writing {out}", flush=True)
    scale = ns.budget_min / sum(p.minutes for p in PARTS)
    outcomes = [run_part(p, out, smoke, count, p.minutes * scale * 60) for p in PARTS]
    bundles = [str(b) for o in outcomes for b in o.bundles if not validate_bundle(b)]
    if bundles:
        subprocess.run([sys.executable, "-m", "xmfu", "report", *bundles, "-o", str(out / "report.html")],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    (out / "summary.md").write_text(summary(outcomes, f"{name} x{count}", smoke))
    (out / "outcomes.json").write_text(json.dumps(
        [{"part": o.part.name, "exit_code": o.exit_code, "seconds": o.seconds, "note": o.note,
          "bundles": [b.name for b in o.bundles]} for o in outcomes], indent=2) + "\n")
    print((out / "summary.md").read_text())
    print(f"gpu-reference: {len(bundles)} valid bundles, report {out / 'report.html'}, summary {out / 'summary.md'}")
    return 0 if bundles else 1


if __name__ == "__main__":
    sys.exit(main())
