"""What validation costs (issue 42 item 5): `xmfu validate` of a 4,000-row bundle, `xmfu compare` of two, and
`load_bundle` of 2-row bundles (what `xmfu fleet report` does for each of thousands of nodes' bundles).

    python benchmarks/validation_cost.py                 # 5 runs of each; goals: compare < 3 s, validate < 2 s
    python benchmarks/validation_cost.py --runs 3 --sizes 500 --only small --keep DIR
    python benchmarks/validation_cost.py --runs 3 --keep DIR --reuse   # the bundles a --keep run left in DIR

The bundles are a real run's and copies of it, all in a temporary folder (or DIR with --keep; nothing else is
written):
- the 2-row bundle: `xmfu run workload=matmul backends=[torch,jax] baseline=torch dtype=fp32 workload.sizes=[16]`
  with a tiny timing budget (seconds on a CPU): its rows, samples, speedup, environment and config.yaml are what
  the engine writes;
- the two 4,000-row bundles: that run's two rows copied to --sizes square sizes (2,000: 16, 17, ... 2015) per backend,
  its config.yaml listing those sizes (so the validator re-plans 2,000 cases), each copy's samples (and warm-up calls)
  its template's scaled to its size (times a 1% jitter), its rows stating no contention (a quiet run's rows, whatever
  the machine was doing when the template ran: every check such a row gets runs), and every figure that follows
  re-computed by the run's own functions (statistics.summary.summarize_many, statistics.speedup.paired_speedup,
  comparability_key, the run's comparability_key through cli/formulas.restate_run): `load_bundle` must find each
  valid before it is timed;
- --small (50) copies of the 2-row bundle the same way, each under its own run id (config.yaml's run_id too), as a
  fleet's nodes' bundles differ from one another.
`xmfu validate` and `xmfu compare` are timed as a user runs them, a fresh `python -m xmfu` process with this
checkout first on PYTHONPATH (imports included, from cached bytecode: each runs once untimed first), --runs times in
turn, and reported as the median (min-max) of
their wall and CPU seconds (user + system, from wait4: the steadier figure on a shared machine). The 2-row bundles'
`load_bundle` is timed in this process (the front door's formulas installed, as every command has them): CPU
milliseconds per load, a figure per pass over the copies. The machine's load average is printed before and after,
and so is the CPU time of a fixed piece of work of the same kinds (`host_reference`: JSON lines decoded, dicts
read, numbers sorted), which no code of xmfu's changes: a shared machine's speed moves by up to 2x within an hour
with no load average showing it, and this figure is a rough gauge of the speed a run met (single runs of both move
by 10% or so on such a machine: read it where it is far from the figures docs/reference-measurements.md gives).
Exit status 0 always: the figures are for reading, not a gate.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOALS = {"validate": 2.0, "compare": 3.0}  # seconds (issue 42 item 5)
TIMING = ["timing.max_time_s=0.05", "timing.warmup_s=0.001", "timing.min_samples=5", "timing.max_samples=10",
          "timing.round_samples=1", "timing.min_sample_s=0.0001"]


def _env() -> dict[str, str]:
    """This checkout first on the path, and bytecode cached as an installed xmfu has it (pip compiles a package at
    install): a shell with PYTHONDONTWRITEBYTECODE set would otherwise compile every module at each start."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def xmfu(*args: str, check: bool = True) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds, exit status, stderr's tail) of `python -m xmfu ARGS` as a child process."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "xmfu", *args], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    err = child.stderr.read().decode(errors="replace") if child.stderr else ""
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if check and code != 0:
        raise SystemExit(f"xmfu {' '.join(args[:2])} failed ({code}): {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, code, err[-2000:]


def template(work: Path, backends: str) -> Path:
    """The 2-row bundle: a real run of one small matmul size on each backend, the first the baseline."""
    baseline = backends.split(",")[0]
    xmfu("run", "workload=matmul", f"backends=[{backends}]", f"baseline={baseline}", "dtype=fp32",
         "workload.sizes=[16]", *TIMING, f"results_dir={work}", "run_id=small")
    small = work / "small"
    rows = [json.loads(x) for x in (small / "cases.jsonl").read_text().splitlines()]
    not_ok = [f"{r['backend']} is {r['status']} ({r['reason']})" for r in rows if r["status"] != "ok"]
    if not_ok:  # a row without timings or a check has nothing to copy (a stack without JAX skips the default's jax)
        print(f"validation_cost.py: the bundles are copies of a run whose rows are all ok, and in {small} "
              f"{'; '.join(not_ok)}. Name backends this stack runs with --backends (the first the baseline), "
              "e.g. --backends torch,torch_compile.", file=sys.stderr)
        raise SystemExit(2)
    return small


def _lines(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, sort_keys=True, allow_nan=False) + "\n" for r in records).encode()


def copy_bundle(small: Path, folder: Path, run_id: str, n_sizes: int, seed: int) -> Path:
    """`small`'s rows copied to `n_sizes` square sizes, every figure re-computed (see the module's docstring)."""
    import numpy as np
    import yaml

    from xmfu.harness.cli.formulas import restate_run
    from xmfu.harness.machine.peaks import BandwidthPeak, Peak
    from xmfu.harness.machine.roofline import Roofs, Work, place
    from xmfu.harness.results import schema
    from xmfu.harness.results.schema.comparability import comparability_key
    from xmfu.harness.results.statistics.speedup import paired_speedup
    from xmfu.harness.results.statistics.summary import summarize_many

    rows = [json.loads(x) for x in (small / schema.CASES).read_text().splitlines()]
    recs = [json.loads(x) for x in (small / schema.SAMPLES).read_text().splitlines()]
    manifest = json.loads((small / schema.MANIFEST).read_text())
    config = yaml.safe_load((small / schema.CONFIG).read_text())
    first = config["workload"]["sizes"][0]
    sizes = [first + i for i in range(n_sizes)]
    config["workload"]["sizes"], config["run_id"] = sizes, run_id
    resamples, margin = config["timing"]["bootstrap_resamples"], config["equivalence_margin"]
    text = yaml.safe_dump(config, sort_keys=False)
    rng = np.random.default_rng(seed)
    out_rows, out_recs = [], []
    for s in sizes:
        for row, rec in zip(rows, recs, strict=True):
            row, rec = json.loads(json.dumps(row)), json.loads(json.dumps(rec))
            scale = (s / first) ** 3 * (1 + 0.01 * rng.standard_normal(len(rec["samples"])))
            rec["samples"] = (np.asarray(rec["samples"]) * scale).tolist()
            if rec.get("warmup"):  # scaled alike, or validate rightly takes the copy for a rescaled forgery
                rec["warmup"] = (np.asarray(rec["warmup"]) * (s / first) ** 3).tolist()
            params = {**row["params"], "m": s, "n": s, "k": s}
            row["case_id"] = rec["case_id"] = f"matmul-{row['dtype']}-{s}x{s}x{s}-NN"
            row["run_id"] = rec["run_id"] = run_id
            row["params"] = params
            row["comparability"] = {**row["comparability"], "params": params}
            row["comparability_key"] = comparability_key(row["comparability"])
            row["flops"], row["bytes"] = 2.0 * s**3, float(3 * s * s * 4)
            row["correctness"]["checked"] = f"all {s}x{s} outputs"
            if isinstance(row.get("contention"), dict):  # a quiet run's rows, whatever the template's machine was
                row["contention"]["contended"] = False  # doing: every check a quiet run's row gets runs
            out_rows.append(row)
            out_recs.append(rec)
    for row, t in zip(out_rows, summarize_many([r["samples"] for r in out_recs], resamples), strict=True):
        flops = row["flops"]
        row["time_s"] = t.as_dict()
        row["tflops"] = flops / t.median / 1e12
        row["tflops_ci95"] = [flops / t.ci95_high / 1e12, flops / t.ci95_low / 1e12]
        row["bandwidth_gbps"] = row["bytes"] / t.median / 1e9
        row["mfu"] = row["tflops"] / row["peak_tflops"]
        if isinstance(row.get("telemetry"), dict):
            row["telemetry"]["mfu_clock_adjusted"] = row["mfu"]
        if isinstance(row.get("roofline"), dict):  # its place at the new size, at the same roofs
            r = row["roofline"]
            roofs = Roofs(Peak(row["peak_tflops"], None, row.get("peak_entry"), ""),
                          BandwidthPeak(r["peak_membw_gbps"], r.get("membw_source"), r.get("membw_entry"), ""),
                          r.get("cache_bytes"))
            row["roofline"] = {**place(Work(flops, row["bytes"]), roofs, t.median), "note": r.get("note")}
    per_size = len(rows)
    for at in range(0, len(out_rows), per_size):
        group = list(zip(out_rows[at:at + per_size], out_recs[at:at + per_size], strict=True))
        for row, rec in group:
            if isinstance(row.get("speedup"), dict):
                base_row, base = next((w, r) for w, r in group if w["backend"] == row["speedup"]["baseline"])
                contended = any((w.get("contention") or {}).get("contended") for w in (row, base_row))
                row["speedup"] = paired_speedup(row["speedup"]["baseline"],
                                                (base["samples"], base["rounds"], base["repeats"]),
                                                (rec["samples"], rec["rounds"], rec["repeats"]), margin,
                                                resamples, contended=contended).as_dict()
    man = {**manifest, "run_id": run_id, "counts": dict.fromkeys(schema.ROW_STATUSES, 0)}
    for row in out_rows:
        man["counts"][row["status"]] += 1
    man["comparability_key"] = restate_run(text, man).figures["comparability_key"]
    if isinstance(man.get("conditions"), dict):
        man["conditions"]["contended_rows"] = []
    target = folder / run_id
    target.mkdir(parents=True)
    files = {schema.CONFIG: text.encode(), schema.ENVIRONMENT: (small / schema.ENVIRONMENT).read_bytes(),
             schema.CASES: _lines(out_rows), schema.SAMPLES: _lines(out_recs), schema.TELEMETRY: b"",
             schema.MANIFEST: (json.dumps(man, indent=2, sort_keys=True) + "\n").encode()}
    for name, data in files.items():
        (target / name).write_bytes(data)
    names = [*schema.REQUIRED_FILES, schema.TELEMETRY]
    (target / schema.SUMS).write_text("".join(f"{hashlib.sha256(files[n]).hexdigest()}  {n}\n" for n in names))
    return target


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s ({min(values):.2f}-{max(values):.2f})"


def _load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def host_reference(passes: int = 3) -> float:
    """CPU seconds of a fixed piece of work (the least of `passes`): 10,000 JSON lines of 60 fields decoded with
    msgspec, every field read back, 2,000,000 numbers sorted with numpy. Nothing of xmfu's runs in it, so it moves
    only with the machine: a figure of this benchmark is read beside it."""
    import msgspec
    import numpy as np

    record = {f"field_{i}": (i * 0.37 if i % 3 else f"text {i} " * 4) for i in range(60)}
    lines = [msgspec.json.encode({**record, "n": n}) for n in range(10_000)]
    values = np.random.default_rng(0).random(2_000_000)
    best = float("inf")
    for _ in range(passes):
        start = time.process_time()
        rows = [msgspec.json.decode(line) for line in lines]
        sum(len(row) for row in rows if all(row.get(k) is not None for k in record))
        np.sort(values)
        best = min(best, time.process_time() - start)
    return best


def bench_commands(a: Path, b: Path, runs: int, which: list[str]) -> dict[str, list[tuple[float, float]]]:
    commands = {"validate": ["validate", str(a)], "compare": ["compare", str(a), str(b)]}
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in which}
    for name in which:  # once untimed: the bytecode written, the files in the page cache
        xmfu(*commands[name], check=False)
    for _ in range(runs):  # in turn, so a drift of the machine's speed reaches each alike
        for name in which:
            wall, cpu, code, err = xmfu(*commands[name], check=False)
            if code != 0:
                raise SystemExit(f"xmfu {name}: exit {code}: {err}")
            out[name].append((wall, cpu))
    return out


def bench_small(work: Path, small: Path, count: int, runs: int, reuse: bool = False) -> list[float]:
    """CPU milliseconds per `load_bundle` of a 2-row bundle, one figure per pass over `count` of them: the run's
    bundle copied under `count` run ids (as a fleet's nodes' bundles differ), each loaded once a pass. `reuse`: the
    copies a --keep run left in `work` where they are there."""
    from xmfu.harness.cli import formulas
    from xmfu.harness.results.bundle.validator import load_bundle

    formulas.install()
    copies = work / "small-copies"
    bundles = [copies / f"small-{i:04d}" if reuse and (copies / f"small-{i:04d}" / "cases.jsonl").exists()
               else copy_bundle(small, copies, f"small-{i:04d}", 1, 100 + i) for i in range(count)]
    for folder in (small, *bundles):
        found = load_bundle(folder)
        if found.problems or found.unchecked:
            raise SystemExit(f"{folder}: not valid: {(found.problems + found.unchecked)[:3]}")
    out = []
    for _ in range(runs):
        start = time.process_time()
        for folder in bundles:
            load_bundle(folder)
        out.append((time.process_time() - start) / count * 1e3)
    return out


PARTS = ("validate", "compare", "small")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument("--sizes", type=int, default=2000, help="sizes per big bundle (rows: sizes x backends)")
    parser.add_argument("--backends", default="torch,jax", help="the run's backends, the first the baseline")
    parser.add_argument("--small", type=int, default=50, help="2-row bundles loaded per timed pass (default 50)")
    parser.add_argument("--only", choices=PARTS, action="append", help="time only this (repeat; default: all)")
    parser.add_argument("--keep", type=Path, help="make the bundles here and keep them (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="with --keep: time the bundles already in DIR (they are "
                        "validated first, as made ones are)")
    args = parser.parse_args(argv)
    only = args.only or PARTS
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {_load()} (1/5/15 min), host "
          f"reference work {host_reference():.3f} s CPU", flush=True)
    with tempfile.TemporaryDirectory(prefix="xmfu-validation-cost-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        def reuse(folder: Path) -> bool:
            return args.reuse and (folder / "cases.jsonl").exists()

        small = work / "small" if reuse(work / "small") else template(work, args.backends)
        if "validate" in only or "compare" in only:
            from xmfu.harness.cli import formulas
            from xmfu.harness.results.bundle.validator import load_bundle

            a, b = (work / name if reuse(work / name) else copy_bundle(small, work, name, args.sizes, seed)
                    for seed, name in enumerate(("big-a", "big-b")))
            formulas.install()
            for folder in (a, b):
                found = load_bundle(folder)
                if found.problems or found.unchecked:
                    raise SystemExit(f"{folder}: {(found.problems + found.unchecked)[:3]}")
            rows = sum(1 for _ in (a / "cases.jsonl").open())
            said = args.backends.split(",")
            speedups = f", each {'/'.join(said[1:])} row with a speedup against {said[0]}" if len(said) > 1 else ""
            made = "reused the bundles" if reuse(a) else "made the bundles"
            print(f"{made} in {time.perf_counter() - start:.1f} s: 2 x {rows} rows ({args.sizes} sizes x "
                  f"{args.backends}{speedups}), copies of a real 2-row run", flush=True)
            timed = bench_commands(a, b, args.runs, [p for p in ("validate", "compare") if p in only])
            for name, runs in timed.items():
                what = f"xmfu validate ({rows} rows)" if name == "validate" else f"xmfu compare (2 x {rows} rows)"
                cpu = statistics.median(c for _, c in runs)
                print(f"{what:32s} wall {_median([w for w, _ in runs])}, CPU {_median([c for _, c in runs])}; goal "
                      f"< {GOALS[name]:g} s: {'met' if cpu < GOALS[name] else 'missed'} (CPU)", flush=True)
        if "small" in only:
            small_ms = bench_small(work, small, args.small, args.runs, args.reuse)
            print(f"{'load_bundle (2 rows), in-process':32s} CPU {statistics.median(small_ms):.1f} ms per load "
                  f"({min(small_ms):.1f}-{max(small_ms):.1f}; {args.runs} passes over {args.small} bundles of one "
                  "config, each its own run id)", flush=True)
    print(f"{args.runs} runs each; load average after: {_load()}, host reference work {host_reference():.3f} s CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
