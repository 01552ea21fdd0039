"""A row's quality flags: the conditions, stored in the row, that make its figure weaker than it reads.

One function, so every place that shows a figure (the end table, compare, the report, the history store) names
the same flags the same way. It reads only the row's stored fields, so an old bundle gets the flags its rows
support and nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def row_flags(row: Mapping[str, Any]) -> list[str]:
    """The row's flags, in a fixed order: `contended` (the runner saw other work on the host or GPU during the
    case: row.contention.contended), `CI missed` (sampling stopped before the CI target: timer.ci_target_met is
    false), `launch-bound` (issuing a call took >= 90% of its time: timer.launch_bound), `timing not valid`
    (an ok row whose time does not represent the hardware: timing_valid false)."""
    timer = row.get("timer") or {}
    out = []
    if (row.get("contention") or {}).get("contended"):
        out.append("contended")
    if timer.get("ci_target_met") is False:
        out.append("CI missed")
    if timer.get("launch_bound"):
        out.append("launch-bound")
    if row.get("status") == "ok" and row.get("timing_valid") is False:
        out.append("timing not valid")
    return out
