"""How the result tools scale with the number of bundles and rows: `xmfu report`, `xmfu history add`, `xmfu export`.

    python benchmarks/results_scale.py                      # report 25/50/100/200 bundles, add/export 10k/50k rows
    python benchmarks/results_scale.py --report 25 50 --rows 10000 --keep DIR

Makes synthetic but valid bundles (rows shaped as the engine writes them, tests/results/rows.py, written by the
bundle writer, so `xmfu validate` passes them) in a temporary folder (or DIR with --keep), then times each command
as a child process (`python -m xmfu ...`, this checkout first on PYTHONPATH) and prints one line per figure,
each with the child's wall time and CPU time (user + system, from wait4: the steadier figure on a shared machine):
report time per bundle count, history add time per row count (a fresh store, then the same bundles
again: all already stored), and export time and peak resident memory (the child's ru_maxrss, from wait4).
Goals (issue 30, item 14): report over 200 bundles < 10 s and linear in N; history add linear in rows; export
peak memory flat in rows (< 500 MB at 50k). Exit status 0 always: the figures are for reading, not a gate.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.results.rows import MANIFEST, matmul_row, samples_of  # noqa: E402
from xmfu.harness.results.bundle.writer import BundleWriter  # noqa: E402

ROWS_PER_BUNDLE = 100  # history add / export: 10k rows = 100 bundles
REPORT_ROWS = 24  # rows per bundle in the report sweep (a matmul sweep of 12 sizes x 2 dtypes)
SIZES = (256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)


def make_bundle(folder: Path, run_id: str, n_rows: int, day: int) -> Path:
    """One complete bundle of `n_rows` matmul rows (distinct sizes, so every row is its own case)."""
    created = f"2026-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T00:00:00.000000Z"
    writer = BundleWriter(folder / run_id, {**MANIFEST, "run_id": run_id, "created": created}, "",
                          {"driver": "570", "packages": {"torch": "2.13.0"}})
    for i in range(n_rows):
        size = SIZES[i % len(SIZES)]
        row = {**matmul_row(size, size, size + 64 * (i // (2 * len(SIZES))), dtype=("bf16", "fp16")[i // 12 % 2]),
               "run_id": run_id}
        writer.append(row, {"case_id": row["case_id"], "backend": row["backend"], "samples": samples_of(row)})
    writer.finalize("complete")
    return folder / run_id


def make_bundles(folder: Path, count: int, n_rows: int, prefix: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [make_bundle(folder, f"{prefix}-{i:05d}", n_rows, i) for i in range(count)]


def xmfu(*args: str) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak resident MB, stderr tail) of `python -m xmfu ARGS` as a child of this
    process. CPU seconds are the child's user + system time (wait4's rusage ru_utime + ru_stime): on a shared
    machine wall time also counts the other processes' turns on the cores, CPU time does not."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "xmfu", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    err = child.stderr.read().decode() if child.stderr else ""
    _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage; ru_maxrss is in KiB on Linux
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if child.returncode != 0:
        raise SystemExit(f"xmfu {' '.join(args[:2])} failed ({child.returncode}): {err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, err


def bench_report(work: Path, counts: list[int]) -> None:
    bundles = make_bundles(work / "report", max(counts), REPORT_ROWS, "report")
    for n in counts:
        wall, cpu, rss, _ = xmfu("report", *map(str, bundles[:n]), "-o", str(work / f"report-{n}.html"))
        print(f"report {n:5d} bundles ({n * REPORT_ROWS:6d} rows): {wall:7.2f} s wall, {cpu:7.2f} s CPU "
              f"({cpu / n * 1e3:.1f} ms CPU/bundle, peak {rss:.0f} MB)", flush=True)


def bench_rows(work: Path, rows: list[int]) -> None:
    made: list[Path] = []
    for total in rows:
        need = total // ROWS_PER_BUNDLE
        made += make_bundles(work / "rows", need - len(made), ROWS_PER_BUNDLE, f"rows{len(made)}") \
            if need > len(made) else []
        chosen = [str(p) for p in made[:need]]
        store = work / f"store-{total}"
        wall, cpu, rss, _ = xmfu("history", "add", *chosen, "--store", str(store))
        again, again_cpu, _, _ = xmfu("history", "add", *chosen, "--store", str(store))
        print(f"history add {total:6d} rows ({need} bundles): {wall:7.2f} s wall, {cpu:7.2f} s CPU "
              f"({cpu / total * 1e6:.0f} us CPU/row, peak {rss:.0f} MB); again, all stored: {again:.2f} s wall, "
              f"{again_cpu:.2f} s CPU", flush=True)
        for suffix in (".parquet", ".csv"):
            wall, cpu, rss, _ = xmfu("export", *chosen, "-o", str(work / f"rows-{total}{suffix}"))
            print(f"export {suffix[1:]:7s} {total:6d} rows: {wall:7.2f} s wall, {cpu:7.2f} s CPU, peak resident "
                  f"{rss:.0f} MB", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=int, nargs="*", default=[25, 50, 100, 200], help="bundle counts")
    parser.add_argument("--rows", type=int, nargs="*", default=[10_000, 50_000], help="row counts (add, export)")
    parser.add_argument("--keep", type=Path, help="make the bundles here and keep them (default: a temporary folder)")
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {REPORT_ROWS} rows per report bundle, "
          f"{ROWS_PER_BUNDLE} rows per add/export bundle", flush=True)
    with tempfile.TemporaryDirectory(prefix="xmfu-scale-") as tmp:
        work = args.keep or Path(tmp)
        if args.report:
            bench_report(work, sorted(args.report))
        if args.rows:
            bench_rows(work, sorted(args.rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
