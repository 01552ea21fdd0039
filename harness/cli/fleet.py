"""`xmfu fleet run | report | resume`: a candidate cluster judged node by node and link by link on its own Slurm
(harness/fleet/). Exit status: 0 PASS, 1 FAIL (a node or link excluded, each named with its reason), 3 NOT JUDGED
(a node could not run, or too few figures for a baseline), 2 bad input (one paragraph, before anything is
submitted)."""

from __future__ import annotations

import argparse
import secrets
import shlex
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from xmfu.harness.cli.common import Parser, usage_error
from xmfu.harness.cli.fleet_manifest import cmd_manifest

USAGE = ("xmfu fleet run --nodes N [options] | xmfu fleet report FOLDER | xmfu fleet resume FOLDER | "
         "xmfu fleet manifest --nodes N [--image IMG] [--level L] -o FILE (a Kubernetes JobSet)")


def _run_parser() -> Parser:
    from xmfu.harness.fleet.schedule import PAIR_MODES
    from xmfu.harness.fleet.spec import LEVELS, RUNTIMES

    p = Parser(prog="xmfu fleet run", description="submit the fleet's checks as one Slurm job, wait, judge")
    p.add_argument("--nodes", type=int, required=True, help="nodes to check (2 or more)")
    p.add_argument("--partition", help="the Slurm partition (default: the cluster's)")
    p.add_argument("--level", choices=LEVELS, default="quick",
                   help="quick: seconds per node; medium: about 2 minutes; long: the acceptance suite")
    p.add_argument("--pairs", choices=PAIR_MODES, default="quick",
                   help="quick: each node with two others; exhaustive: every pair, N-1 rounds")
    p.add_argument("--baseline", help="an earlier fleet folder, or an expectation file (docs/fleet.md)")
    p.add_argument("--rules", help="a rules file (YAML): a threshold and its reason per figure (docs/fleet.md)")
    p.add_argument("--container-image", help="run every step in this image (pyxis/enroot, or Apptainer)")
    p.add_argument("--container-runtime", choices=RUNTIMES, default="pyxis")
    p.add_argument("--container-mounts", default="", help="more SRC:DST mounts, comma-separated")
    p.add_argument("--scale", choices=("auto", "smoke", "full"), default="auto",
                   help="the node checks' sizes (auto: smoke sizes on a node without an accelerator)")
    p.add_argument("--step-limit", type=int, help="minutes each step may run before Slurm ends it (default: the "
                   "level's: quick 10 per node check, 5 per pair, 10 per all-node step)")
    p.add_argument("--xmfu-command", help="how a step starts xmfu on a node (a wrapper, `module load ...`); default: "
                   "this Python's `-m xmfu`, or `xmfu` inside a container")
    p.add_argument("--results-dir", default="results", help="a folder every node can write (a shared file system)")
    p.add_argument("--id", help="the fleet folder's name (default: a UTC stamp)")
    p.add_argument("--test-only", action="store_true", help="write the job and ask sbatch --test-only; submit nothing")
    p.add_argument("--no-wait", action="store_true", help="submit and return; judge later with xmfu fleet report")
    p.add_argument("--queue-limit", type=float, default=60.0,
                   help="minutes to wait for the job to start before leaving it queued (default %(default)g)")
    return p


def _spec(ns: argparse.Namespace):
    from xmfu.harness.fleet.spec import Container, FleetSpec, check

    fleet_id = ns.id or f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-fleet-{secrets.token_hex(3)}"
    mounts = tuple(m for m in ns.container_mounts.split(",") if m)
    xmfu = ns.xmfu_command or ("xmfu" if ns.container_image else shlex.join([sys.executable, "-m", "xmfu"]))
    spec = FleetSpec(fleet_id, ns.nodes, ns.level, ns.pairs, str(Path(ns.results_dir).resolve()), ns.partition,
                     ns.baseline, ns.rules, Container(ns.container_image, ns.container_runtime, mounts), xmfu,
                     ns.scale, f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ}", ns.step_limit)
    problems = check(spec)
    if problems:
        raise ValueError("; ".join(problems))
    return spec


def _inputs_checked(rules: str | None, baseline: str | None) -> None:
    from xmfu.harness.fleet.outcome import baselines
    from xmfu.harness.fleet.rules import load

    load(rules)
    baselines(baseline)


def cmd_run(args: Sequence[str]) -> int:
    from xmfu.harness.fleet import slurm, submit

    ns = _run_parser().parse_args(args)
    try:
        spec = _spec(ns)
        _inputs_checked(ns.rules, ns.baseline)
    except ValueError as exc:
        return usage_error(f"fleet run: {exc}")
    why = slurm.available()
    if why:
        return usage_error(f"fleet run: {why}")
    if spec.folder.exists():
        return usage_error(f"fleet run: {spec.folder} exists: give another --id, or `xmfu fleet resume {spec.folder}`")
    try:
        sub = submit.submit(spec, test_only=ns.test_only)
    except (slurm.SlurmError, OSError) as exc:
        shutil.rmtree(spec.folder, ignore_errors=True)  # it held only the spec and the script of a job never run
        return usage_error(f"fleet run: {exc}. Nothing was submitted.")
    if isinstance(sub, str):
        print(f"sbatch --test-only: {sub}\nfleet: {spec.folder} (job script written, nothing submitted)")
        return 0
    print(f"xmfu fleet {spec.fleet_id}: job {sub.job_id}, {spec.nodes} nodes, level {spec.level}, pairs {spec.pairs}; "
          f"writing {spec.folder}", flush=True)
    if ns.no_wait:
        print(f"fleet: {spec.folder} (judge it when the job has ended: xmfu fleet report {spec.folder})")
        return 0
    return _watch_and_judge(spec.folder, sub, ns.queue_limit)


def _watch_and_judge(folder: Path, sub, queue_limit_min: float = 60.0) -> int:
    from xmfu.harness.fleet import slurm, submit

    try:
        end = submit.wait(folder, sub, queue_limit_min * 60, say=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print(f"\nxmfu fleet: stopped watching; job {sub.job_id} goes on. Judge it later: xmfu fleet report "
              f"{folder}", file=sys.stderr)
        return 130
    except slurm.SlurmError as exc:
        print(f"xmfu fleet: {exc}; judging the folder as it stands", file=sys.stderr)
    else:
        if end.state == "PENDING":
            print(f"NOT JUDGED: job {sub.job_id} {end.reason}; judge it once it has run: xmfu fleet report {folder}")
            return 3
        why = f" ({end.reason})" if end.reason and end.reason != "None" else ""
        print(f"xmfu fleet: job {sub.job_id} ended: {end.state}{why}", flush=True)
    return _judge(folder, None, None)


def _judge(folder: Path, rules: str | None, baseline: str | None) -> int:
    from xmfu.harness.fleet import outcome

    try:
        found = outcome.gathered(folder)
        d, used = outcome.judged(folder, rules, baseline, found)
    except ValueError as exc:  # a folder that is no fleet folder, a bad rules or baseline file
        return usage_error(f"fleet: {exc}")
    fleet = found[1]
    outcome.write(folder, fleet, d, used)
    print(outcome.line(d))
    for host, found in sorted(d.excluded.items()):
        print(f"  excluded {host}: " + "; ".join(f"{f.code}: {f.detail}" for f in found))
    for f in d.findings:
        if f.subject not in fleet.nodes:
            print(f"  link {f.subject}: {f.code}: {f.detail}")
    for caveat in _said_once(d.caveats):
        print(f"  caveat: {caveat}")
    print(f"fleet: {folder}")
    return outcome.EXIT[d.verdict]


SHARED = "every node's doctor says: "


def _said_once(caveats: list[str]) -> list[str]:
    """What every node's doctor says, as one line (verdict.json and the page list them), then the other caveats."""
    shared = [c.removeprefix(SHARED) for c in caveats if c.startswith(SHARED)]
    if len(shared) < 2:
        return caveats
    return [f"every node's doctor says {len(shared)} things, held against no node (verdict.json lists them; the first: "
            f"{shared[0]})", *(c for c in caveats if not c.startswith(SHARED))]


def cmd_report(args: Sequence[str]) -> int:
    p = Parser(prog="xmfu fleet report", description="judge a fleet folder again (rules and baseline may change)")
    p.add_argument("folder")
    p.add_argument("--rules")
    p.add_argument("--baseline")
    ns = p.parse_args(args)
    try:
        _inputs_checked(ns.rules, ns.baseline)
    except ValueError as exc:
        return usage_error(f"fleet report: {exc}")
    return _judge(Path(ns.folder), ns.rules, ns.baseline)


def cmd_resume(args: Sequence[str]) -> int:
    from xmfu.harness.fleet import outcome, slurm, submit

    p = Parser(prog="xmfu fleet resume", description="submit only what the fleet folder is missing, then judge")
    p.add_argument("folder")
    p.add_argument("--no-wait", action="store_true")
    ns = p.parse_args(args)
    folder = Path(ns.folder)
    try:
        spec, fleet = outcome.gathered(folder)
    except ValueError as exc:
        return usage_error(f"fleet resume: {exc}")
    hosts, names = outcome.missing(spec, fleet)
    if not names:
        print(f"xmfu fleet resume: nothing is missing in {folder}")
        return _judge(folder, None, None)
    why = slurm.available()
    if why:
        return usage_error(f"fleet resume: {why}")
    try:
        sub = submit.submit(spec, hosts, names)
    except (slurm.SlurmError, OSError) as exc:
        return usage_error(f"fleet resume: {exc}")
    print(f"xmfu fleet resume {spec.fleet_id}: job {sub.job_id} runs {len(names)} missing steps on "
          f"{', '.join(hosts)}", flush=True)
    return 0 if ns.no_wait else _watch_and_judge(folder, sub)


def cmd_admitted(args: Sequence[str]) -> int:
    """What the job's all-node steps run over: the nodes the node checks and links so far admit, comma-separated on
    one line (nothing when none); the job calls it between the link rounds and the all-node steps."""
    from xmfu.harness.fleet import outcome

    p = Parser(prog="xmfu fleet admitted", description="the nodes admitted so far, comma-separated (for the job)")
    p.add_argument("folder")
    ns = p.parse_args(args)
    try:
        d = outcome.judged(Path(ns.folder))[0]
    except ValueError as exc:
        return usage_error(f"fleet admitted: {exc}")
    print(",".join(d.admitted))
    return 0


def cmd_flagged(args: Sequence[str]) -> int:
    """The nodes whose own figures (matmul, node fabric) the checks so far flag, comma-separated on one line
    (nothing when none); the job calls it after the node checks and measures those nodes again (job.again_lines);
    with --links, the flagged links as A:B, after the link rounds (job.links_again_lines)."""
    from xmfu.harness.fleet import outcome
    from xmfu.harness.fleet.rules import NODE_FIGURES

    p = Parser(prog="xmfu fleet flagged", description="the nodes to check again, comma-separated (for the job)")
    p.add_argument("--links", action="store_true", help="the links instead, as A:B")
    p.add_argument("folder")
    ns = p.parse_args(args)
    try:
        found = outcome.gathered(Path(ns.folder))
        d, fleet = outcome.judged(Path(ns.folder), found=found)[0], found[1]
    except ValueError as exc:
        return usage_error(f"fleet flagged: {exc}")
    # a node or link already measured twice (a resumed job judges the whole folder again) is not measured a third time
    if ns.links:
        slow = {f.subject for f in d.findings if f.figure == "link_busbw_gbps"}
        print(",".join(f"{p.a}:{p.b}" for p in fleet.pairs if p.name in slow and not p.measured_again))
    else:
        flagged = {f.subject for f in d.findings if f.figure in NODE_FIGURES}
        print(",".join(sorted(h for h in flagged if not fleet.nodes[h].measured_again)))
    return 0


def cmd_fleet(args: Sequence[str]) -> int:
    commands = {"run": cmd_run, "report": cmd_report, "resume": cmd_resume, "manifest": cmd_manifest,
                "admitted": cmd_admitted, "flagged": cmd_flagged}
    if not args or args[0] not in commands:
        said = f"{args[0]!r} is not a fleet command" if args else "a fleet command is needed"
        return usage_error(f"fleet: {said}: {USAGE}")
    return commands[args[0]](args[1:])
