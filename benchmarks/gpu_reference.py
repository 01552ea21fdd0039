"""`make gpu-reference`: the GPU reference set, in parts that each finish within 8 minutes on one H100.

    python benchmarks/gpu_reference.py --list [--out DIR]       the parts, their budgets and estimated minutes
    python benchmarks/gpu_reference.py [--part NAME ...] [--out DIR] [--redo] [--smoke] [--budget-min M]
                                       [--doctor] [--archive [FILE]]

Each part (benchmarks/reference_parts.py) is one `xmfu run` writing one bundle into the output folder, stopped at its
budget (SIGTERM, which xmfu turns into a `partial` bundle keeping every finished case; SIGKILL if it has not ended
GRACE_S later), so no part outlives its budget and a GPU node's 10-minute cap on one command is never reached. A
part whose valid bundle (`xmfu validate`'s checks) is already in the output folder is skipped, a partial one too
(`--redo` runs it again), so the set can be done over several invocations or jobs. After the parts, `report.html`
and `summary.md` are rebuilt from everything in the folder (`--doctor` first writes `xmfu doctor`'s view of the node
to `doctor.txt` there); `--archive` then packs the folder into one `.tar.gz`
(`xmfu archive`: every bundle validated, a manifest of every file's SHA-256) to carry off a node without network.

The output folder (default `results/reference/<device>/`) holds one bundle per part (`<part>.<UTC time>-<hex>`),
`parts/<part>.json` (each part's last attempt: command, budget, estimate, exit status, seconds, whether it was
stopped, its bundle and that bundle's status), `report.html`, `summary.md`, and `superseded/` (bundles of earlier
attempts, moved aside when a part runs again). The summary and the report are rebuilt from these files alone.

Without an accelerator every part runs at smoke sizes (to prove the plumbing) into a temporary folder, never into
results/reference/. It needs no `make`, git or the repository's .venv: it runs `python -m xmfu` with the
interpreter that runs it, on this checkout's code, with whatever xmfu's dependencies that interpreter has (a
wheelhouse install works offline).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from reference_estimates import listed_estimate  # noqa: E402
from reference_parts import BY_NAME, MAX_BUDGET_S, PARTS, Part  # noqa: E402


class _Folder:
    """benchmarks/reference_state.py, imported on first use: it validates bundles (numpy, the validator), which
    `--list` without `--out` never needs."""

    def __getattr__(self, name: str) -> Any:
        import reference_state

        return getattr(reference_state, name)


folder: Any = _Folder()

GRACE_S = 30.0  # after SIGTERM: time to write the partial bundle's manifest and checksums before SIGKILL
KILL_WAIT_S = 10.0  # after SIGKILL: how long to wait for the part to be gone
# Run in the part's process, then replaced by the part (execv): SIGTERM to it when this script dies, however it dies
# (a job's hard limit may SIGKILL it), so that a part in its own process group never outlives the script. Linux's
# prctl(PR_SET_PDEATHSIG = 1), prctl(2), kept across execve; elsewhere nothing. A script already gone: no part. (Not a
# preexec_fn: Python code between fork and exec may deadlock where the parent has threads, as numpy's BLAS has.)
DIE_WITH_PARENT = ("import ctypes, os, signal, sys\n"
                   "prctl = getattr(ctypes.CDLL(None), 'prctl', None)\n"
                   "if prctl is not None: prctl(1, signal.SIGTERM)\n"
                   "if os.getppid() != int(sys.argv[1]): sys.exit(143)\n"
                   "os.execv(sys.argv[2], sys.argv[2:])")
REPORT_TIMEOUT_S = 120.0
DETECT_TIMEOUT_S = 300.0
# No framework named: torch is asked only where /dev shows a GPU, JAX only where it has an accelerator plugin
# (harness/machine/platform.py detect), so that on a CPU nothing heavy is imported.
DETECT = ("import json; from xmfu.harness.machine.platform import detect; p = detect('auto', ()); "
          "print(json.dumps([p.device.name, len(p.devices), p.has_accelerator]))")


class Usage(ValueError):
    """Bad input: one paragraph, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"gpu_reference.py: {message}. See `python benchmarks/gpu_reference.py --help`.", file=sys.stderr)
        sys.exit(2)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = Parser(prog="gpu_reference.py", description=__doc__.splitlines()[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="Parts: " + ", ".join(p.name for p in PARTS))
    parser.add_argument("--list", action="store_true", help="print the parts with their budgets and estimated "
                        "minutes on one H100 (with --out: whether each is done there), run nothing")
    parser.add_argument("--part", action="append", default=[], metavar="NAME",
                        help="run this part (repeat, or NAME,NAME; default: every part)")
    parser.add_argument("--out", help="output folder (default: results/reference/<device>; without an accelerator "
                        "a temporary folder)")
    parser.add_argument("--redo", action="store_true", help="run the chosen parts even where a valid bundle is there")
    parser.add_argument("--smoke", action="store_true", help="smoke sizes even on an accelerator")
    parser.add_argument("--doctor", action="store_true",
                        help="first, xmfu doctor's view of the node into doctor.txt in the output folder")
    parser.add_argument("--archive", nargs="?", const="", metavar="FILE",
                        help="after the parts, pack the output folder into FILE (.tar.gz; default: the folder's "
                        "name + .tar.gz beside it) with xmfu archive")
    parser.add_argument("--budget-min", type=float, default=MAX_BUDGET_S / 60,
                        help=f"stop each part after this many minutes at most (default and most: "
                        f"{MAX_BUDGET_S / 60:g})")
    ns = parser.parse_args(argv)
    ns.part = chosen_parts(ns.part)
    if ns.archive and not ns.archive.lower().endswith((".tar.gz", ".tgz")):
        raise Usage(f"--archive {ns.archive}: the archive's name must end in .tar.gz or .tgz")
    if not 0 < ns.budget_min <= MAX_BUDGET_S / 60:
        raise Usage(f"--budget-min {ns.budget_min:g}: allowed is more than 0 and at most {MAX_BUDGET_S / 60:g} "
                    "(minutes per part)")
    return ns


def chosen_parts(names: Sequence[str]) -> list[Part]:
    """The parts named (in the set's order), every part when none is; an unknown name is bad input."""
    wanted = [n.strip() for arg in names for n in arg.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown:
        raise Usage(f"--part: unknown part {', '.join(unknown)}. Allowed: {', '.join(p.name for p in PARTS)} "
                    "(`--list` describes them)")
    return [p for p in PARTS if not wanted or p.name in wanted]


def detect_device() -> tuple[str, int, bool]:
    """(device name, device count, is an accelerator), asked in a child process so that this one never holds a GPU
    context (or JAX's memory pool) while the parts run."""
    proc = subprocess.run([sys.executable, "-c", DETECT], cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=DETECT_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"device detection failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    name, count, accelerator = json.loads(proc.stdout.strip().splitlines()[-1])
    return name, count, accelerator


def slug(name: str, count: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + f"-x{count}"


def output_folder(given: str | None, device: str, smoke: bool) -> Path:
    """The folder the parts write into; smoke results never go under results/reference/. Smoke sizes without
    --out: a new temporary folder of this invocation's own (a fixed one, shared by every user and run on the
    machine, mixed their parts and made a stale part count as done); --out DIR resumes there."""
    reference = ROOT / "results" / "reference"
    if given is None:
        return reference / device if not smoke else Path(tempfile.mkdtemp(prefix=f"xmfu-gpu-reference-smoke-{device}-"))
    out = Path(given).resolve()
    if smoke and out.is_relative_to(reference.resolve()):
        raise Usage(f"--out {given}: smoke sizes never write under {reference} (no accelerator here, or --smoke). "
                    "Allowed: a folder outside it")
    if out.exists() and not out.is_dir():
        raise Usage(f"--out {given}: is a file. Allowed: a folder (created if missing)")
    return out


def child_env(extra: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """This checkout's packages first (xmfu/__init__.py then finds its harness beside it), whatever xmfu the
    interpreter has installed; `extra` values are appended to the variable's own (XLA_FLAGS)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    for key, value in extra:
        env[key] = " ".join(v for v in (env.get(key), value) if v)
    return env


def command(part: Part, out: Path, run_id: str, smoke: bool, gpus: int, extra: Sequence[str] = ()) -> list[str]:
    xmfu = ["-m", "xmfu", "run", *part.overrides(smoke), *extra, f"results_dir={out}", f"run_id={run_id}"]
    if not part.ranks:
        return [sys.executable, *xmfu]
    nproc = 2 if smoke else max(gpus, 1)  # two gloo processes on a CPU, to run the real plumbing
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *xmfu]


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # nothing of the group is left
        os.killpg(proc.pid, sig)


def stop(proc: subprocess.Popen, grace_s: float) -> int | None:
    """SIGTERM to the part's process group (xmfu closes its bundle as partial); after `grace_s`, or at once if this
    is interrupted meanwhile, SIGKILL to whatever of the group is left (processes it started included). None where
    the part has not died even then (a process stuck in the driver)."""
    try:
        signal_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    finally:
        signal_group(proc, signal.SIGKILL)
    try:
        return proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        return None


def run_within(cmd: Sequence[str], env: dict[str, str], budget_s: float) -> tuple[int | None, str | None, float]:
    """Run `cmd` in a process group of its own, stopped at `budget_s` at the latest: SIGTERM `grace` before it,
    SIGKILL at it. Returns (exit status, "budget" or None, seconds). An interrupt of this script (Ctrl-C, or
    SIGTERM from a job's time limit) stops the part the same way, then goes on up."""
    grace = min(GRACE_S, budget_s / 4)
    start = time.monotonic()
    # Its own process group, stopped as one (torchrun's workers, Inductor's compile workers); our group's signals
    # (a terminal's Ctrl-C) reach it only through this script, and the trampoline's if the script dies.
    trampoline = [sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), *cmd]
    proc = subprocess.Popen(trampoline, cwd=ROOT, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=budget_s - grace)
        return code, None, time.monotonic() - start
    except subprocess.TimeoutExpired:
        return stop(proc, grace), "budget", time.monotonic() - start
    except KeyboardInterrupt:
        stop(proc, grace)
        raise


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_part(part: Part, out: Path, smoke: bool, device: str, gpus: int, budget_s: float) -> dict[str, Any]:
    """One attempt at a part, recorded in parts/<part>.json before it starts and when it ends."""
    sizes = "smoke" if smoke else "full"
    folder.supersede(out, part.name)
    run_id = f"{part.name}.{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"
    achievable = folder.achievable_overrides(out, part.achievable_from, sizes, device) if part.achievable_from else []
    cmd = command(part, out, run_id, smoke, gpus, achievable)
    state: dict[str, Any] = {"part": part.name, "sizes": sizes, "device": device, "bundle": run_id,
                             "command": cmd, "budget_s": budget_s, "estimate_min": listed_estimate(part.name).minutes,
                             "started": utc_now(), "finished": None,
                             "exit_code": None, "stopped": None, "seconds": None, "status": "running"}
    folder.write_state(out, state)  # a stop of this script in the middle leaves the attempt on record
    code, stopped, seconds = None, None, None
    try:
        code, stopped, seconds = run_within(cmd, child_env(part.smoke_env if smoke else ()), budget_s)
    except KeyboardInterrupt:  # this script was interrupted: the part is stopped already
        stopped = "interrupted"
        raise
    finally:
        loaded = folder.load(out, run_id)
        status = loaded.bundle.manifest.get("status") if loaded.bundle and not loaded.problems else None
        state.update(finished=utc_now(), exit_code=code, stopped=stopped, seconds=seconds,
                     status=status or "no valid bundle")
        folder.write_state(out, state)
    return state


def build_report(out: Path) -> str:
    """report.html of every part's valid bundle in the folder, in the set's order."""
    report = out / "report.html"
    if folder.report_is_current(out, report):
        return f"report {report} (no part has run since it was built)"
    bundles = [str(out / s["bundle"]) for s in folder.states(out) if s.get("valid")]
    if not bundles:
        report.unlink(missing_ok=True)  # an older one would show bundles that are no longer there
        return "no valid bundle: no report"
    try:
        proc = subprocess.run([sys.executable, "-m", "xmfu", "report", *bundles, "-o", str(report)],
                              cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=REPORT_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        return f"the report took over {REPORT_TIMEOUT_S:g} s and was stopped"
    return f"report {report}" if proc.returncode == 0 else f"report failed: {proc.stderr.strip()[-500:]}"


def list_parts(out: Path | None) -> None:
    print("GPU reference set: minutes on one H100 are ESTIMATED, NOT MEASURED (no part has run on a GPU yet); "
          "benchmarks/reference_parts.py derives them: start + timing budget + device calls + preparation + host.")
    header = f"{'part':24} {'rows':>5} {'budget':>6} {'est.':>5}   start timing device prepare  host"
    print(header + ("   in " + str(out) if out else ""))
    total = 0.0
    for part in PARTS:
        e = listed_estimate(part.name)
        total += e.minutes
        terms = "".join(f"{e.terms[k] / 60:{w}.1f}" for k, w in (("start", 8), ("timing", 7), ("device", 7),
                                                                  ("prepare", 8), ("host", 6)))
        there = f"   {folder.state_line(out, part)}" if out else ""
        print(f"{part.name:24} {e.cases:5d} {part.budget_s / 60:6.1f} {e.minutes:5.1f} {terms}{there}")
        print(f"{'':24} {part.what}")
    print(f"{'total':24} {'':5} {'':6} {total:5.1f}   minutes (rows: case x backend pairs; budget and estimate in "
          "minutes; each part is stopped at its budget)")


def main(argv: Sequence[str] | None = None) -> int:
    """0: every part chosen has a valid bundle in the folder; 1: one has not; 2: bad input."""
    try:
        ns = parse_args(sys.argv[1:] if argv is None else argv)
        if ns.list:
            list_parts(Path(ns.out).resolve() if ns.out else None)
            return 0
        return run_set(ns)
    except Usage as exc:
        print(f"gpu_reference.py: {exc}", file=sys.stderr)
        return 2


def run_set(ns: argparse.Namespace) -> int:
    try:
        name, count, accelerator = detect_device()
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
        print(f"gpu_reference.py: {exc}", file=sys.stderr)
        return 1
    smoke = ns.smoke or not accelerator
    device, sizes = slug(name, count), "smoke" if smoke else "full"
    out = output_folder(ns.out, device, smoke)
    out.mkdir(parents=True, exist_ok=True)
    print(f"gpu-reference: {name} x{count}, {sizes} sizes, writing {out}", flush=True)
    if ns.doctor:
        print(f"gpu-reference: {doctor(out)}", flush=True)
    for part in ns.part:
        finished, what = folder.done(out, part, sizes, device)
        if finished and not ns.redo:
            print(f"gpu-reference: {part.name} skipped: {what} (--redo runs it again)", flush=True)
            continue
        budget_s = min(part.budget_s, ns.budget_min * 60)
        print(f"gpu-reference: {part.name}: running, stopped after {budget_s / 60:.2f} min at the latest", flush=True)
        state = run_part(part, out, smoke, device, count, budget_s)
        print(f"gpu-reference: {part.name}: {folder.outcome(state)}", flush=True)
    print(f"gpu-reference: {build_report(out)}", flush=True)
    (out / "summary.md").write_text(folder.summary(out, f"{name} x{count}", smoke))
    print((out / "summary.md").read_text())
    missing = [p.name for p in ns.part if not folder.done(out, p, sizes, device)[0]]
    print(f"gpu-reference: summary {out / 'summary.md'}; "
          + (f"without a valid bundle: {', '.join(missing)}" if missing else "every part chosen has a valid bundle"))
    packed = 0 if ns.archive is None else pack(out, Path(ns.archive) if ns.archive else out.with_name(
        out.name + ".tar.gz"))
    return 1 if missing or packed else 0


def doctor(out: Path) -> str:
    """`xmfu doctor` into out/doctor.txt: what the node's frameworks, devices, telemetry and clocks look like, kept
    with the figures (its exit status 1 names problems, which are recorded, not fatal to the set)."""
    try:
        proc = subprocess.run([sys.executable, "-m", "xmfu", "doctor"], cwd=ROOT, env=child_env(),
                              capture_output=True, text=True, timeout=REPORT_TIMEOUT_S, check=False)
        text, status = proc.stdout + proc.stderr, f"exit {proc.returncode}"
    except subprocess.TimeoutExpired:
        text, status = "", f"stopped after {REPORT_TIMEOUT_S:g} s"
    (out / "doctor.txt").write_text(f"$ xmfu doctor    # {status}\n{text}")
    problems = sum(1 for line in text.splitlines() if line.startswith("PROBLEM"))
    return f"doctor: {status}, {problems} problems named, in {out / 'doctor.txt'}"


def pack(out: Path, archive: Path) -> int:
    """`xmfu archive OUT -o ARCHIVE`: the folder, its bundles, report and summary as one file; its exit status."""
    proc = subprocess.run([sys.executable, "-m", "xmfu", "archive", str(out), "-o", str(archive.resolve())],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=REPORT_TIMEOUT_S,
                          check=False)
    print(f"gpu-reference: {(proc.stdout or proc.stderr).strip()}", flush=True)
    return proc.returncode


def entry() -> int:
    """main, with SIGTERM (a job's time limit) handled like Ctrl-C: the running part is stopped and recorded."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return main()
    except KeyboardInterrupt:
        print("gpu-reference: interrupted; the part running was stopped, its state kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(entry())
