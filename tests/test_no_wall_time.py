"""No test asserts wall time (issue 42 item 6): `make test` failed on a loaded machine because two tests bounded how
long a run took (60 s allowed, 69 s and 91 s taken beside a second `make test`). A test that waits waits for an
event, bounded generously (a deadline, a subprocess timeout); how long something takes is a benchmark's figure
(benchmarks/bounds.py), printed on the machine it was measured on.

The check reads every test module's syntax: an `assert` may not bound an elapsed time from above, that is compare
`clock() - t0` (or a name computed from such a difference, or a clock reading appended to a list and read back)
with `<` or `<=`. A deadline (`time.monotonic() < deadline`) bounds a wait, not a duration, and a lower bound
(`elapsed >= 0.3`, what a sleep guarantees) cannot fail on a slow machine: both are allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns"}


def _is_clock(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "time")


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _target_names(target: ast.AST) -> set[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(t) for t in target.elts))
    if isinstance(target, (ast.Subscript, ast.Attribute)):
        return _target_names(target.value)
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return {target.id} if isinstance(target, ast.Name) else set()


def _flows(fn: ast.AST) -> list[tuple[set[str], ast.AST]]:
    """(names written, the value written) for each assignment, and for `x.append(value)`."""
    flows: list[tuple[set[str], ast.AST]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            flows.append((set().union(*(_target_names(t) for t in node.targets)), node.value))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            flows.append((_target_names(node.target), node.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
              and node.args):
            flows.append((_target_names(node.func.value), node.args[0]))
    return flows


def _tainted(fn: ast.AST) -> tuple[set[str], set[str]]:
    """(names holding a clock reading, names holding an elapsed time), to a fixpoint over the function's flows."""
    readings: set[str] = set()
    elapsed: set[str] = set()
    flows = _flows(fn)
    changed = True
    while changed:
        changed = False
        for targets, value in flows:
            reads = any(_is_clock(n) for n in ast.walk(value)) or bool(_names(value) & readings)
            if reads and not targets <= readings:
                readings |= targets
                changed = True
            lasts = _has_difference(value, readings) or bool(_names(value) & elapsed)
            if lasts and not targets <= elapsed:
                elapsed |= targets
                changed = True
    return readings, elapsed


def _has_difference(node: ast.AST, readings: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub) and any(
                _is_clock(n) or (isinstance(n, ast.Name) and n.id in readings) for n in ast.walk(sub)):
            return True
    return False


def _bounds_above(compare: ast.Compare, readings: set[str], elapsed: set[str]) -> bool:
    operands = [compare.left, *compare.comparators]
    for i, op in enumerate(compare.ops):
        small, large = operands[i], operands[i + 1]
        if isinstance(op, (ast.Gt, ast.GtE)):
            small, large = large, small
        elif not isinstance(op, (ast.Lt, ast.LtE)):
            continue
        if _has_difference(small, readings) or _names(small) & elapsed:
            return True
    return False


def wall_time_asserts(source: str) -> list[int]:
    """Line numbers of the asserts in `source` that bound an elapsed wall time from above."""
    tree = ast.parse(source)
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        readings, elapsed = _tainted(fn)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assert) and any(
                    isinstance(c, ast.Compare) and _bounds_above(c, readings, elapsed) for c in ast.walk(node.test)):
                found.append(node.lineno)
    return sorted(set(found))


def test_the_check_finds_each_way_a_duration_was_bounded():
    source = '''
def a():
    start = time.monotonic()
    run()
    assert time.monotonic() - start < 60 and ok
def b():
    stopped = time.monotonic()
    took = time.monotonic() - stopped
    assert took < 3 + 20, took
def c(ended):
    ended[k] = err, time.monotonic() - stopped[k]
    err0, took = ended[k]
    assert took < 4 + 20
def d():
    ended = []
    ended.append((reason, time.monotonic()))
    start = time.perf_counter()
    (reason, when), = ended
    assert when - start < 0.3 + 3
def fine():
    deadline = time.monotonic() + 240
    assert time.monotonic() < deadline, "no row was written"
    start = time.monotonic()
    assert time.monotonic() - start >= 0.3
'''
    assert wall_time_asserts(source) == [5, 9, 13, 19]


def test_no_test_asserts_wall_time():
    offenders = [f"{path.relative_to(TESTS.parent)}:{line}" for path in sorted(TESTS.rglob("*.py"))
                 for line in wall_time_asserts(path.read_text())]
    assert offenders == [], "these asserts bound a wall time (move the figure to benchmarks/bounds.py): " + \
        ", ".join(offenders)
