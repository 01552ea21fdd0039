"""How often the seeded signal and rank trials repeat.

The loops are in the slow group, outside `make test` (whose goal is under 6 minutes on 2 cores): `make test-slow`,
which CI runs, runs each loop the count it names; `XMFU_TRIALS=N` runs every loop N times instead (`make
test-trials` runs only these tests, 8 times each), which is how a rare race is hunted. The draws are seeded, so trial
k is the same moment in every run.
"""

from __future__ import annotations

import os


def trials(default: int) -> int:
    """The loop's count: XMFU_TRIALS when set (a positive integer), else `default`."""
    value = os.environ.get("XMFU_TRIALS", "")
    return int(value) if value.strip().isdigit() and int(value) > 0 else default
