"""After the timed loop, the output of the last timed call is read back and checked again.

The check before timing proves the backend can compute the case; it does not prove the timed calls did. GPU MODE's
reference kernels saw outputs deferred into the untimed checker (the timed call returned at once, the check
computed; reference-kernels #161) and outputs replayed from a cache (#160): the timed call's own output, read
without calling anything of the backend (`Prepared.output`), and checked against the inputs it read (the last
ones timing.fresh_inputs wrote, or the case's), catches both where the output differs from what those inputs give.
A failed re-check makes the row `incorrect`; its `timed_check` says what was compared, or why nothing was.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xmfu.harness.engine.attempts import Attempt
from xmfu.harness.engine.case import Case, Prepared, RunAborted
from xmfu.harness.engine.timers import first_tensor
from xmfu.harness.machine.frameworks import jax_rows, torch_rows

NO_READER = "not re-checked: this backend reads no output of a call (Prepared.output)"


def read_output(out: Any, rows: Any) -> np.ndarray:
    """A plug-in's reader (plugins.py): the array its call returned (the first in a tuple, list or dict), at the
    case's check rows, as float64 on the host."""
    if rows is not None and not (isinstance(rows, np.ndarray) and rows.dtype.kind in "iu"):
        raise ValueError(f"the case checks {type(rows).__name__} selections, not rows of one array: declare "
                         "Prepared.output to read them")
    tensor = first_tensor(out)
    if tensor is not None:
        return torch_rows(tensor, rows)
    found = out if hasattr(out, "shape") and hasattr(out, "dtype") else None
    if found is None:
        raise ValueError(f"the timed call returned {type(out).__name__}, no array: return the output, or declare "
                         "Prepared.output")
    return jax_rows(found, rows)


def timed_output(a: Attempt, case: Case, fresh_required: bool) -> None:
    """Re-check `a`'s last timed output (its series keeps it until now) and record it in `a.timed_check`; a wrong
    one makes the attempt incorrect. `fresh_required`: timing.fresh_inputs is on, so an output that cannot be read
    fails the row (the re-check is what the fresh inputs are for)."""
    p, s = a.prepared, a.series
    if p is None or s is None:
        return
    out, s.last_output = s.last_output, None  # the output's memory is the next case's
    if hasattr(s.timer, "last_output"):
        s.timer.last_output = None
    if a.status != "ok" or s.error is not None or not s.samples:
        return
    ran = p.case or case
    target = a.fresh.current if a.fresh is not None and a.fresh.current is not None else ran
    inputs = f"timing.fresh_inputs' last (seed {target.seed})" if target is not ran else "the case's"
    if p.check_case is not None and p.check_case is not ran:
        a.timed_check = {"ok": None, "note": "not re-checked: the backend is checked on another case than it runs"}
        return
    if p.output is None:
        a.timed_check = {"ok": None, "note": NO_READER}
        return
    try:
        check = target.check(p.output(out, target.check_rows()))
    except RunAborted:
        raise
    except Exception as exc:  # an output that cannot be read: said, and under fresh_inputs the row's failure
        why = f"the output of the last timed call could not be read back: {type(exc).__name__}: {exc}"[:500]
        a.timed_check = {"ok": None, "inputs": inputs, "note": f"not re-checked: {why}"}
        if fresh_required:
            a.status, a.reason = "failed", f"timing.fresh_inputs: {why}"
        return
    a.timed_check = {**check.as_dict(), "inputs": inputs}
    if not check.ok:
        a.status = "incorrect"
        a.reason = (f"the last timed call's output, re-checked after the timed loop against {inputs} inputs: "
                    f"{check.metric} {check.error:.3g} exceeds tolerance {check.tolerance:.3g} ({check.checked}); "
                    "it passed the check before timing, so the timed calls did not compute it (an output cached "
                    "from other inputs, or left to the untimed check)")


def reader_for_plugin(p: Any) -> Any:
    """A plug-in's Prepared with the array reader where it declares none."""
    if isinstance(p, Prepared) and p.output is None:
        p.output = read_output
    return p
