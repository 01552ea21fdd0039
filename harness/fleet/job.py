"""The fleet's Slurm job: one generated sbatch script whose body is srun steps, the pattern Slurm users run
(torchtitan's multinode_trainer.slurm; NeMo-Run's Slurm executor): per-node checks, all nodes at once, one step per
node; the link tests, a round of disjoint node pairs at a time; then the collective and the training step over every
node. Slurm places, starts, limits (`srun --time`) and ends every step; xmfu only writes the script and reads what
the steps wrote.

Every step records how it ended in `steps/NAME.json` (its exit status, nodes and times), written by the script
itself after srun returns, so a step that Slurm killed (time limit, a node that died, scancel) is told apart from
one that ran and failed: the first has a non-zero status from srun and no result of its own, or no record at all.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from xmfu.harness.fleet import schedule
from xmfu.harness.fleet.spec import AGAIN, NODE_EXPERIMENT, FleetSpec

STEPS = "steps"  # the folder of step records
NODES_FILE = "nodes.txt"  # the job's nodes, one per line, in Slurm's order (scontrol show hostnames)
LINK_SIZES = "[1M,64M]"  # the link test's all_reduce sizes: one in the latency-bound range, one bandwidth-bound


@dataclass(frozen=True)
class Step:
    """One srun step: its record's name, its nodes (shell words: `${NODES[i]}` or a host), what it runs."""

    name: str
    kind: str  # node | pair | all
    nodes: tuple[str, ...]
    command: tuple[str, ...]  # xmfu's arguments
    minutes: int
    count: str = ""  # the node count as a shell word, where the nodes are known only when the job runs


def node_ref(i: int) -> str:
    return f"${{NODES[{i}]}}"


def node_steps(spec: FleetSpec, nodes: Sequence[str]) -> list[Step]:
    """The per-node check of every node: the level's suite overlay, results under nodes/<host>/."""
    out = []
    for host in nodes:
        command = ("run", f"experiment={NODE_EXPERIMENT[spec.level]}", f"suite.scale={spec.scale}",
                   "results_dir=$F/nodes", f"run_id={host}")
        out.append(Step(f"node-{_label(host)}", "node", (host,), command, spec.minutes("node")))
    return out


def link_command(run_id: str, folder: str = "$F/links") -> tuple[str, ...]:
    """An all_reduce over the step's ranks (one per node: the network between them, not the node's own fabric),
    at one latency-bound and one bandwidth-bound size; nccl-tests' iterations cut to 5 (its -n is 20): a link check
    wants the bandwidth, not a paper's precision."""
    return ("run", "workload=collectives", "backends=[torch_dist]", "workload.ops=[all_reduce]",
            f"workload.sizes={LINK_SIZES}", "workload.mode=[throughput]", "workload.iters=5", "workload.warmup=2",
            "workload.samples=5", f"results_dir={folder}", f"run_id={run_id}")


def pair_rounds(spec: FleetSpec, nodes: Sequence[str]) -> list[list[Step]]:
    """The link tests, round by round: each round's pairs are disjoint, so they run at once."""
    out = []
    for pairs in schedule.rounds(spec.pairs, len(nodes)):
        steps = []
        for a, b in pairs:
            name = f"pair-{_label(nodes[a])}-{_label(nodes[b])}"
            command = link_command(name)
            steps.append(Step(name, "pair", (nodes[a], nodes[b]), command, spec.minutes("pair")))
        out.append(steps)
    return out


ADMITTED, N_ADMITTED = "$ADMITTED", "$N_ADMITTED"  # the admitted nodes (comma-separated) and their count, at run time


def all_steps(spec: FleetSpec) -> list[Step]:
    """The admitted nodes together: the collective, then a data-parallel training step (one process per node)."""
    train = ("run", "workload=transformer", "backends=[torch]", "workload.parallel=[ddp]", "model=tiny",
             "dtype=fp32", "timing=quick", "results_dir=$F/all", "run_id=all-training")
    collective = link_command("all-collectives", "$F/all")
    return [Step("all-collectives", "all", (ADMITTED,), collective, spec.minutes("all"), N_ADMITTED),
            Step("all-training", "all", (ADMITTED,), train, spec.minutes("all"), N_ADMITTED)]


def _label(host: str) -> str:
    """A host (or `${NODES[i]}`) as part of a step's name: `${NODES[3]}` -> `${NODES[3]}` stays a shell word."""
    return host


def srun_words(spec: FleetSpec, step: Step) -> list[str]:
    """The srun options of a step: its nodes (one task each), its time limit, and the container flags."""
    count = step.count or str(len(step.nodes))
    words = [f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1",
             f"--nodelist={','.join(step.nodes)}", f"--time={step.minutes}", f"--job-name={step.name}"]
    c = spec.container
    if c.image and c.runtime == "pyxis":
        # pyxis adds these to srun (NVIDIA/pyxis README, "Usage", v0.24.0 = 10751994): --container-image=
        # [USER@][REGISTRY#]IMAGE[:TAG] or a squashfs path on the node ('#' between registry and image, an enroot
        # URI); --container-mounts=SRC:DST[:FLAGS][,SRC:DST...], entries split at ',', flags joined by '+'
        # (ro+rprivate; args.c spank_option_mount/parse_mount_option); --container-workdir=PATH. The fleet folder
        # is always mounted at its own path, so $F means the same inside and out.
        words += [f"--container-image={c.image}", f"--container-mounts={','.join(_mounts(spec))}",
                  "--container-workdir=$F"]
    return words


def _mounts(spec: FleetSpec) -> list[str]:
    return ["$F:$F", *spec.container.mounts]


# Apptainer binds the host's GPU driver into the container only when asked: --nv (NVIDIA) and --rocm (AMD), both
# given (allowed together since Apptainer 1.2.3, CHANGELOG "The --nv and --rocm flags can now be used
# simultaneously"; before it only --nv applied); on a node without one of them Apptainer warns "Could not find
# any nv/rocm files on this host!" and goes on (internal/pkg/runtime/launch/launcher_linux.go, SetGPUConfig;
# apptainer/apptainer at 917d6657, v1.5.3+).
APPTAINER_GPU = ("--nv", "--rocm")


def command_words(spec: FleetSpec, step: Step) -> list[str]:
    """The step's command: xmfu's, after `apptainer exec --nv --rocm --bind SRC:DST[:ro|rw][,...] IMAGE` for the
    Apptainer runtime (apptainer/apptainer cmd/internal/cli/action_flags.go, -B|--bind: "spec has the format
    src[:dest[:opts]] ... Multiple bind paths can be given by a comma separated list"; the same SRC:DST[:ro]
    entries serve pyxis and Apptainer, pyxis' '+'-joined flags do not)."""
    c = spec.container
    prefix = ["apptainer", "exec", *APPTAINER_GPU, "--bind", ",".join(_mounts(spec)), c.image] if (
        c.image and c.runtime == "apptainer") else []
    return [*prefix, *shlex.split(spec.xmfu), *step.command]


def _quote(word: str) -> str:
    """A shell word that keeps `$F` and `${NODES[i]}` expandable and everything else literal."""
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def step_line(spec: FleetSpec, step: Step, background: bool) -> str:
    words = [_quote(step.name), _quote(",".join(step.nodes)), *map(_quote, srun_words(spec, step)),
             *map(_quote, command_words(spec, step))]
    return "step " + " ".join(words) + (" &" if background else "")


HEADER = """#!/bin/bash
# xmfu fleet {fleet_id}: written by `xmfu fleet run` (docs/fleet.md). Every check is an srun step of this job;
# each step's end is recorded in $F/steps/NAME.json, and what it said on stderr in NAME.err, by `step` below.
{sbatch}
set -u
F={folder}
mkdir -p "$F/steps" "$F/nodes" "$F/links" "$F/all"
"""

STEP_FUNCTION = """
# step NAME NODES SRUN-OPTIONS... COMMAND...: run one srun step, then record its exit status and times.
step() {
  local name=$1 nodes=$2 started rc
  shift 2
  started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  echo "$started xmfu fleet: $name on $nodes" >&2
  srun "$@" 2> "$F/steps/$name.err"
  rc=$?
  printf '{"name": "%s", "nodes": "%s", "rc": %d, "started": "%s", "finished": "%s"}\\n' \\
    "$name" "$nodes" "$rc" "$started" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$F/steps/$name.json.tmp"
  mv "$F/steps/$name.json.tmp" "$F/steps/$name.json"
}
"""


def sbatch_lines(spec: FleetSpec, nodes: int, nodelist: Sequence[str] = (), minutes: int = 0) -> str:
    # --no-kill: a node that fails ends only the steps on it, not the job (sbatch(1)), so the other nodes' checks
    # finish and the failed one is said to have been unable to run
    lines = [f"#SBATCH --job-name=xmfu-fleet-{spec.fleet_id}", f"#SBATCH --nodes={nodes}",
             "#SBATCH --ntasks-per-node=1", "#SBATCH --no-kill",
             f"#SBATCH --output={spec.folder.resolve()}/slurm-%j.out"]
    if minutes:
        lines.append(f"#SBATCH --time={minutes}")
    if spec.partition:
        lines.append(f"#SBATCH --partition={spec.partition}")
    if nodelist:
        lines.append(f"#SBATCH --nodelist={','.join(nodelist)}")
    return "\n".join(lines)


def script(spec: FleetSpec, hosts: Sequence[str] = (), steps: Sequence[str] | None = None) -> str:
    """The job's script. `hosts`: the nodes by name (a resumed job, on the nodes of the first); empty: whatever
    Slurm allocates, read at run time into NODES. `steps`: the names to run (None: every step)."""
    n = len(hosts) or spec.nodes
    nodes = list(hosts) or [node_ref(i) for i in range(n)]
    plan = [node_steps(spec, nodes), *pair_rounds(spec, nodes), *[[s] for s in all_steps(spec)]]
    plan = [[s for s in group if steps is None or s.name in steps] for group in plan]
    plan = [group for group in plan if group]
    total = sum(max(s.minutes for s in group) for group in plan) + 5
    if any(group[0].kind == "node" for group in plan):
        total += spec.minutes("node") + 5  # the flagged nodes' checks again, and the judgement that picks them
    if any(group[0].kind == "pair" for group in plan):
        total += 2 * spec.minutes("pair") + 5  # two flagged links again, one after the other, and the judgement
    body = [HEADER.format(fleet_id=spec.fleet_id, folder=shlex.quote(str(spec.folder.resolve())),
                          sbatch=sbatch_lines(spec, n, hosts, total)), STEP_FUNCTION]
    if hosts:
        body.append("NODES=(" + " ".join(shlex.quote(h) for h in hosts) + ")")
    else:
        body.append('mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")')
    body.append(f'printf "%s\\n" "${{NODES[@]}}" > "$F/{NODES_FILE}.$SLURM_JOB_ID"')
    together = [group for group in plan if group[0].kind == "all"]
    for group in [group for group in plan if group[0].kind != "all"]:
        body.append(f"\n# {group[0].kind} steps")
        body += [step_line(spec, s, background=len(group) > 1) for s in group]
        if len(group) > 1:
            body.append("wait")
        if group[0].kind == "node":
            body += again_lines(spec, nodes[0])
    if any(group[0].kind == "pair" for group in plan):
        body += links_again_lines(spec, nodes[0])
    if together:
        body += admitted_lines(spec, nodes[0], [step_line(spec, g[0], background=False) for g in together])
    return "\n".join(body) + "\n"


def judgement(spec: FleetSpec, variable: str, name: str, first: str, command: tuple[str, ...]) -> str:
    """`VARIABLE=$(srun ...)`: an `xmfu fleet` judgement of the folder so far, an srun step on the first node (in
    the container where there is one), its answer on stdout, what it said in steps/NAME.err."""
    judge = Step(name, "admit", (first,), command, 5)
    words = " ".join(_quote(w) for w in [*srun_words(spec, judge), *command_words(spec, judge)])
    return f'{variable}=$(srun {words} 2> "$F/steps/{name}.err")'


def again_step(spec: FleetSpec, host: str) -> Step:
    """The node check of `host` once more, into nodes/<host>-again/ (gather.py reads both, the better counts)."""
    first = node_steps(spec, [host])[0]
    command = tuple(f"run_id={host}-{AGAIN}" if w.startswith("run_id=") else w for w in first.command)
    return Step(f"{first.name}-{AGAIN}", "node", (host,), command, first.minutes)


def again_lines(spec: FleetSpec, first: str) -> list[str]:
    """The node checks again, at once, on the nodes whose own figures (matmul, node fabric) the first checks
    flagged, as `xmfu fleet flagged` judges them: a node is excluded as slow only when it is slow twice (the better
    of its two measurements is judged), so that one check disturbed by other work on its host (seen on this
    project's local cluster: two of four untouched nodes 2.7x below the others while other jobs ran on the host)
    does not exclude it, while a slow GPU, its clocks or its cooling are slow again. Acceptance suites re-test
    before they exclude (ROCm cvs admits hosts one at a time; SuperBench re-runs a diagnosis on its defective
    nodes)."""
    again = step_line(spec, again_step(spec, "$host"), background=True)
    return ["\n# node checks again where a node's own figure was flagged: slow twice, or not slow",
            judgement(spec, "FLAGGED", "flagged", first, ("fleet", "flagged", "$F")),
            'for host in ${FLAGGED//,/ }; do', f"  {again}", "done", "wait"]


def links_again_lines(spec: FleetSpec, first: str) -> list[str]:
    """The link tests again, one after the other (two flagged links may share a node), on the pairs whose bus
    bandwidth the rounds flagged, as `xmfu fleet flagged --links` judges them: a link is slow only when it is slow
    twice (gather.py judges the better measurement). On this project's local cluster a whole round of links read
    slow while other work started on the host."""
    name = f"pair-$a-$b-{AGAIN}"
    again = Step(name, "pair", ("$a", "$b"), link_command(name), spec.minutes("pair"))
    return ["\n# link tests again where a link was flagged: slow twice, or not slow",
            judgement(spec, "FLAGGED_LINKS", "flagged-links", first, ("fleet", "flagged", "--links", "$F")),
            'for pair in ${FLAGGED_LINKS//,/ }; do', '  a=${pair%%:*} b=${pair#*:}',
            f"  {step_line(spec, again, background=False)}", "done"]


def admitted_lines(spec: FleetSpec, first: str, lines: Sequence[str]) -> list[str]:
    """The all-node steps, over the nodes the node checks and links admitted: `xmfu fleet admitted` judges the
    folder so far (an srun step on the first node, in the container where there is one) and prints them."""
    return ["\n# all-node steps, over the nodes admitted so far",
            judgement(spec, "ADMITTED", "admitted", first, ("fleet", "admitted", "$F")),
            "N_ADMITTED=$(printf '%s' \"$ADMITTED\" | tr ',' '\\n' | grep -c .)",
            'if [ "$N_ADMITTED" -ge 2 ]; then', *(f"  {line}" for line in lines), "else",
            '  echo "xmfu fleet: fewer than 2 nodes admitted (${ADMITTED:-none}): no all-node steps" >&2', "fi"]
