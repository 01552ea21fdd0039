"""A suite's one-word verdict, the first line of its verdict page, of suite.json and of what it prints:
PASS, FAIL or NOT JUDGED, with the reasons.

- FAIL: a problem was found (a part failed, a device or node was an outlier, a regression, ranks missing...).
- NOT JUDGED: no problem was found, but the figures are no evidence either way: some rows carry a flag that
  makes their figure meaningless (contended: harness/results/analysis/flags.py), or no row has a validly timed figure at
  all (rows checked but never timed by design, Triton's interpreter on a CPU, are a caveat, not a reason). A run
  with 30 of 66 rows contended is not a pass.
- PASS: nothing of the above. The caveats are named after the verdict: the other flags (CI missed,
  launch-bound...) and the changes for the worse `history check` discounted as within their own row's noise
  (`unreliable: noisy`; one discounted as contended has its row flagged contended, so the run is NOT JUDGED).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from xmfu.harness.results.analysis import flags
from xmfu.harness.results.schema.row import Row

PASS, FAIL, NOT_JUDGED = "PASS", "FAIL", "NOT JUDGED"
SHOWN = 3  # problems named on the first line; the page and the printed output list every one


@dataclass(frozen=True)
class Judgement:
    verdict: str  # PASS | FAIL | NOT JUDGED
    reasons: list[str] = field(default_factory=list)  # why it is not a pass (FAIL, NOT JUDGED)
    caveats: list[str] = field(default_factory=list)  # flags that do not stop a judgement, counted

    def line(self) -> str:
        """'NOT JUDGED: 30 of 66 rows contended (first: ...)'; the caveats after the reasons."""
        said = [*self.reasons[:SHOWN], *([f"and {len(self.reasons) - SHOWN} more"] if len(self.reasons) > SHOWN
                                         else []), *(f"caveat: {c}" for c in self.caveats)]
        return self.verdict + (": " + "; ".join(said) if said else "")

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reasons": self.reasons, "caveats": self.caveats, "line": self.line()}


def _first(rows: Sequence[Row], name: str) -> str:
    """The first row carrying flag `name`, and why, as an example."""
    for r in rows:
        for f in flags.flags_of(r):
            if f.name == name:
                return f"{r.case_id} {r.backend}: {f.why}"
    return ""


def judge(rows: Sequence[Row], problems: Sequence[str] = (),
          unreliable: Sequence[str] = ()) -> Judgement:
    """The verdict over a suite's rows (every bundle's), the problems found and the discounted changes."""
    counts = flags.tally(rows)
    total = len(rows)
    unjudged = [f"{counts[n]} of {total} rows {n} (first: {_first(rows, n)})" for n in flags.UNJUDGED if n in counts]
    caveats = [f"{n} {counts[n]} of {total} rows" for n in counts if n not in flags.UNJUDGED]
    if unreliable:
        caveats.append(f"{len(unreliable)} changes for the worse discounted as unreliable (listed as NOTE)")
    if problems:
        return Judgement(FAIL, [*problems, *unjudged], caveats)
    reasons = list(unjudged)
    if not any(r.status == "ok" and r.timing_valid for r in rows):
        reasons.append(f"no row has a valid timed figure ({total} rows)")
    return Judgement(NOT_JUDGED, reasons, caveats) if reasons else Judgement(PASS, [], caveats)
