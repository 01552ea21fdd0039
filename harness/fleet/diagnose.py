"""Each node's and each link's figures against the fleet's robust baseline (or a given one), by the rules: who is
admitted, who is excluded and why, in reason codes a person can act on.

The baseline of a figure is the median of the nodes (or pairs) that measured it and its robust spread, the median
absolute deviation scaled by 1.4826 to a standard deviation (Rousseeuw & Croux 1993, JASA 88:1273; SuperBench's
diagnosis builds its baseline from fleet data the same way), so one or a few bad nodes do not move it. A figure is
flagged only when its whole 95% CI lies below the rule's threshold, so its own noise alone flags nothing.

Reason codes: could-not-run (the node's check never finished: Slurm ended it, the node died, the job was cancelled;
said as such, never as a failure), part-failed, invalid-result, missing-device, throttled, doctor, and each rule's
code (slow-matmul, slow-node-fabric, slow-link).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from xmfu.harness.fleet.gather import Figure, Fleet, NodeResult, PairResult, StepRecord
from xmfu.harness.fleet.rules import FIGURES, Rule

MAD_TO_SIGMA = 1.4826  # MAD of a normal sample x 1.4826 estimates its standard deviation
MIN_FOR_BASELINE = 3  # fewer values give no robust median and spread: the figure is not judged
# Up to this many values, each is judged against the others alone: in a large fleet leaving one out changes nothing
# (and judging 500,000 pairs that way would cost a median each)
LEAVE_ONE_OUT_BELOW = 32
# Fewer other values than this give no spread worth a threshold (harness/results/history/judge.py's MIN_BASELINE, from
# its simulation: below 5 points a MAD rule is a coin toss): a figure is then judged by the rule's fraction alone
# against the others' lower bounds (few_peers)
MIN_FOR_SPREAD = 5
PASS, FAIL, NOT_JUDGED = "PASS", "FAIL", "NOT JUDGED"


@dataclass(frozen=True)
class Finding:
    subject: str  # a host, or a pair `pair-a-b`
    code: str
    detail: str
    figure: str | None = None
    value: float | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class Baseline:
    figure: str
    median: float
    sigma: float
    n: int
    source: str  # this fleet's nodes, an earlier fleet folder, an expectation file


@dataclass
class Diagnosis:
    verdict: str
    reasons: list[str]
    findings: list[Finding] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)
    excluded: dict[str, list[Finding]] = field(default_factory=dict)
    baselines: dict[str, Baseline] = field(default_factory=dict)
    caveats: list[str] = field(default_factory=list)


def robust(values: Sequence[float], figure: str, source: str, least: int = MIN_FOR_BASELINE) -> Baseline | None:
    if len(values) < least:
        return None
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    return Baseline(figure, median, MAD_TO_SIGMA * mad, len(values), source)


def few_peers(rule: Rule, others: Sequence[Figure], source: str) -> tuple[Baseline, float]:
    """The baseline and threshold where fewer than MIN_FOR_SPREAD others judge a figure: the rule's fraction below
    the median of the others' lower 95% bounds, with no spread term (a MAD of two to four values is half a gap or
    less: the spread it gives is as wide as the nodes' own disagreement, and on the local cluster two live peers 30%
    apart left a node at a third of their speed unflagged). Each peer is taken at its own pessimistic bound, so its
    noise cannot make a node look slow."""
    median = statistics.median(g.low for g in others)
    limit = median * (1 - rule.below_median)
    limit = max(limit, rule.floor) if rule.floor is not None else limit
    return Baseline(rule.figure, median, 0.0, len(others), f"{source} (their lower 95% bounds)"), limit


def threshold(rule: Rule, base: Baseline) -> float:
    """Below this a figure is low: under both the rule's fraction of the median and its sigmas of the spread, or
    under the rule's floor."""
    relative = min(base.median * (1 - rule.below_median), base.median - rule.sigmas * base.sigma)
    return max(relative, rule.floor) if rule.floor is not None else relative


def why_not_run(host: str, step: StepRecord | None) -> str:
    """What Slurm said about a check that never finished (srun's and slurmstepd's messages, slurm 22.05)."""
    if step is None:
        return (f"{host}'s check has no step record: the job ended before it did (cancelled, over its time limit, "
                "or the batch host died)")
    said = step.said
    if "DUE TO TIME LIMIT" in said or "time limit" in said.lower():
        return f"{host}'s check ran past its time limit and Slurm ended it"
    if "Node failure" in said or "NODE_FAIL" in said or "Communication connection failure" in said:
        return f"{host} went down while its check ran (Slurm: node failure)"
    if "CANCELLED" in said:
        return f"{host}'s check was cancelled"
    tail = " ".join(said.split())[-200:] or "nothing on stderr"
    return f"{host}'s check ended without its record (srun exited {step.rc}: {tail})"


def node_findings(n: NodeResult, devices: int | None, common_doctor: set[str]) -> list[Finding]:
    if not n.ran:
        return [Finding(n.host, "could-not-run", why_not_run(n.host, n.step))]
    if n.interrupted:  # its figures are a part of a check: nothing else is judged of it
        return [Finding(n.host, "could-not-run", f"{n.host}'s check was ended by a signal ({', '.join(n.interrupted)}):"
                        f" {why_not_run(n.host, n.step)}")]
    out = [Finding(n.host, "part-failed", p) for p in n.failed_parts]
    out += [Finding(n.host, "invalid-result", f"a bundle that does not validate: {why}") for why in n.invalid]
    if devices is not None and n.devices is not None and n.devices < devices:
        out.append(Finding(n.host, "missing-device", f"{n.devices} devices where the fleet's nodes have {devices}"))
    if n.throttled:
        out.append(Finding(n.host, "throttled", ", ".join(f"{k} in {v:.0%} of readings"
                                                          for k, v in sorted(n.throttled.items()))))
    out += [Finding(n.host, "doctor", p) for p in n.doctor_problems if p not in common_doctor]
    return out


@dataclass(frozen=True)
class Measured:
    """A subject's figure to judge and the figure it lends the others' baseline: its first measurement. A node or
    link checked again ran with fewer others at once (on a shared host, faster): judged by the better of its two, it
    still counts in the baseline at its first, so a check again never raises the bar the others are held to (five
    untouched local fleets: one excluded a node that way, docs/fleet.md)."""

    subject: str
    judged: Figure
    first: Figure


def measured(subjects: Sequence[tuple[str, Figure | None, Figure | None]]) -> list[Measured]:
    """(subject, judged figure, first figure or None where it was measured once) -> the measured ones."""
    return [Measured(s, f, first or f) for s, f, first in subjects if f is not None]


def judge_figures(rule: Rule, subjects: Sequence[Measured], given: Baseline | None,
                  source: str) -> tuple[Baseline | None, list[Finding]]:
    """The figures below the rule's threshold. In a small fleet each subject is judged against the others alone
    (leave-one-out, LEAVE_ONE_OUT_BELOW): with a handful of nodes the one being judged would otherwise widen the
    spread it is judged by (three nodes, one four times slower: its own distance made the MAD so wide that no
    threshold was left). Baselines are built from first measurements only (Measured)."""
    base = given or robust([m.first.value for m in subjects], rule.figure, source)
    if base is None:
        return None, []
    unit = FIGURES[rule.figure][0]
    out = []
    for i, m in enumerate(subjects):
        own = base
        if given is None and len(subjects) <= LEAVE_ONE_OUT_BELOW:
            others = [o.first for j, o in enumerate(subjects) if j != i]
            if len(others) < MIN_FOR_SPREAD:  # two others are enough: the fleet itself had the three it needs
                own, limit = few_peers(rule, others, f"{source} but {m.subject}")
            else:
                own = robust([g.value for g in others], rule.figure, f"{source} but {m.subject}") or base
                limit = threshold(rule, own)
        else:
            limit = threshold(rule, own)
        f = m.judged
        if f.high < limit:
            out.append(Finding(m.subject, rule.code, f"{f.value:.4g} {unit} (95% CI {f.low:.4g}-{f.high:.4g}) below "
                               f"{limit:.4g}, the threshold from the median {own.median:.4g} of {own.source}: "
                               f"{rule.reason}", rule.figure, f.value, limit))
    return base, out


def link_findings(rule: Rule, pairs: Sequence[PairResult], given: Baseline | None,
                  skip: set[str]) -> tuple[Baseline | None, list[Finding], list[str]]:
    """Slow links; a node with two or more judged links, every one of them slow, is named itself (`slow-link` on
    the host): the fault is in it, not in one cable (on one link, cable and node cannot be told apart). Pairs with a
    node that could not run are not links to judge."""
    tested = [p for p in pairs if not ({p.a, p.b} & skip)]
    base, slow = judge_figures(rule, measured([(p.name, p.busbw, p.first_busbw) for p in tested]), given,
                               f"{len(tested)} pairs")
    slow_names = {f.subject for f in slow}
    blamed = []
    for host in sorted({h for p in tested for h in (p.a, p.b)}):
        mine = [p for p in tested if host in (p.a, p.b) and p.busbw is not None]
        if len(mine) >= 2 and all(p.name in slow_names for p in mine):
            blamed.append(host)
    return base, slow, blamed


def diagnose(fleet: Fleet, rules: Sequence[Rule],
             baseline: Callable[[str], Baseline | None] = lambda figure: None) -> Diagnosis:
    ran = [n for n in fleet.nodes.values() if n.ran]
    devices = max((n.devices for n in ran if n.devices is not None), default=None)
    problems = [set(n.doctor_problems) for n in ran]
    common = set.intersection(*problems) if problems else set()
    findings = [f for n in fleet.nodes.values() for f in node_findings(n, devices, common)]
    out = Diagnosis(NOT_JUDGED, [], caveats=[f"every node's doctor says: {p}" for p in sorted(common)])
    source = f"this fleet's {len(ran)} nodes"
    for rule in rules:
        if rule.figure == "link_busbw_gbps":
            skip = {n.host for n in fleet.nodes.values() if not n.ran}
            base, slow, blamed = link_findings(rule, fleet.pairs, baseline(rule.figure), skip)
            findings += slow + [Finding(h, rule.code, f"every link tested from {h} is slow (two or more)")
                                for h in blamed]
        else:
            both = ((lambda n: (n.matmul, n.first_matmul)) if rule.figure == "matmul_tflops"
                    else (lambda n: (n.busbw, n.first_busbw)))
            base, found = judge_figures(rule, measured([(n.host, *both(n)) for n in ran]), baseline(rule.figure),
                                        source)
            findings += found
        if base is not None:
            out.baselines[rule.figure] = base
    return _verdict(out, fleet, findings)


def _verdict(out: Diagnosis, fleet: Fleet, findings: list[Finding]) -> Diagnosis:
    out.findings = findings
    for f in findings:
        if f.subject in fleet.nodes:
            out.excluded.setdefault(f.subject, []).append(f)
    out.admitted = [h for h in fleet.hosts if h not in out.excluded]
    failing = [f for f in findings if f.code != "could-not-run"]
    not_run = sorted({f.subject for f in findings if f.code == "could-not-run"})
    unjudged = [name for name in ("matmul_tflops", "link_busbw_gbps") if name not in out.baselines]
    contended = sum(1 for n in fleet.nodes.values() for f in (n.matmul, n.busbw) if f and f.contended)
    if contended:
        out.caveats.append(f"{contended} node figures were measured while other work ran on their host (contended)")
    again = [h for h in fleet.hosts if h in fleet.nodes and fleet.nodes[h].measured_again]
    again += [p.name for p in fleet.pairs if p.measured_again]
    if again:
        out.caveats.append(f"checked twice, the better measurement judged (the first was flagged): {', '.join(again)}")
    if failing:
        out.verdict = FAIL
        subjects = sorted({f.subject for f in failing})
        out.reasons = [f"{len(subjects)} of {len(fleet.hosts)} nodes or links flagged: " + ", ".join(
            f"{s} ({', '.join(sorted({f.code for f in failing if f.subject == s}))})" for s in subjects)]
    elif not_run or unjudged:
        out.verdict = NOT_JUDGED
        out.reasons = ([f"could not run: {', '.join(not_run)} (xmfu fleet resume runs what is missing)"] if not_run
                       else []) + [f"{FIGURES[u][1]} not judged: fewer than {MIN_FOR_BASELINE} measured and no "
                                   "--baseline" for u in unjudged]
    else:
        out.verdict = PASS
        out.reasons = [f"{len(out.admitted)} nodes admitted, {len(fleet.pairs)} links within their thresholds"]
    if not_run and failing:
        out.reasons.append(f"could not run: {', '.join(not_run)}")
    return out
