"""The architecture, enforced: imports point one way and nothing imports in a circle.

front door (xmfu, harness/cli/, harness/kernelcheck/, harness/fleet/, harness/suites/, harness/config/,
harness/api.py, harness/run.py) -> workloads -> engine -> results / machine; results never imports the engine or a
workload; machine imports neither the engine nor results; kernels import nothing of ours. Inside the front door the
cli is the top, then kernelcheck/, fleet/, suites/, the API, the run composition (config/) and the run itself;
inside results/ each room imports only the rooms below it (RESULTS_ROOMS). Every room has an `__init__` docstring
saying what lives there and what it may import, and holds at most MAX_ROOM_MODULES modules; no module is longer than
MAX_MODULE_LINES.

Every import is counted, including the lazy ones inside functions (an `import` in a function body is still a
dependency) and modules named as text to be imported on first use (workloads/catalog.py's
`Lazy("xmfu.workloads.matmul.torch", ...)`).

Everything installs under one import name, xmfu: the folder harness/ is the package xmfu.harness (pyproject.toml's
package-dir), so a module's name here is the name it is imported by.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("xmfu",)
FOLDERS = ("harness", "workloads", "kernels")  # each placed under xmfu by pyproject.toml's package-dir
OLD_NAMES = ("harness", "workloads", "kernels")  # top-level names that no longer exist once installed
FRONT_DOOR = "front door"
# layer -> the layers it may import (besides itself)
ALLOWED = {
    FRONT_DOOR: {"workloads", "engine", "results", "machine", "kernels"},
    "workloads": {"engine", "results", "machine", "kernels"},
    "engine": {"results", "machine"},
    "results": {"machine"},
    "machine": set(),
    "kernels": set(),
}


# The front door's rooms, top first: a room imports only the rooms after it (and the layers below the front door).
FRONT_DOOR_ROOMS = ("cli", "kernelcheck", "fleet", "suites", "api", "config", "run")
# results/'s rooms, lowest first: a room imports only the rooms before it.
RESULTS_ROOMS = ("schema", "statistics", "importers", "rederive", "bundle", "analysis", "plots", "history", "render")
MAX_ROOM_MODULES = 10
MAX_MODULE_LINES = 400
MAX_ENGINE_FUNCTION_LINES = 50


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "xmfu" else ["xmfu", *parts])


def layer(module: str) -> str:
    parts = module.split(".")[1:]  # xmfu.<folder>...
    if parts[:1] == ["harness"]:
        if len(parts) > 1 and parts[1] in ("engine", "results", "machine"):
            return parts[1]
        return FRONT_DOOR  # harness/__init__, cli/, suites/, hydra_app, config, api, run
    if parts[:1] in (["workloads"], ["kernels"]):
        return parts[0]
    return FRONT_DOOR  # xmfu itself: the API and `python -m xmfu`


def sources() -> dict[str, Path]:
    files = [p for pkg in (*FOLDERS, "xmfu") for p in (ROOT / pkg).rglob("*.py")]
    return {module_name(p): p for p in files}


def imports_of(path: Path, module: str, known: set[str]) -> set[str]:
    """Our modules that `path` imports, resolved to the longest known module name."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            names = [node.value] if node.value in known else []  # a module path imported later (the catalog's Lazy)
        for name in names:
            if name.split(".")[0] not in OURS:
                continue
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """Every module's imports of ours: parsed once per test process (the tree does not change while the tests run;
    each test reads it, and parsing every module took about a second each time)."""
    mods = sources()
    known = set(mods)
    return {m: imports_of(p, m, known) for m, p in mods.items()}


def room(module: str) -> str | None:
    """The room of a front-door or results module: `cli`, `suites`, ... or `results.bundle`; None elsewhere."""
    parts = module.split(".")[1:]
    if parts[:2] == ["harness", "results"] and len(parts) > 2:
        return f"results.{parts[2]}"
    if parts[:1] == ["harness"] and len(parts) > 1 and parts[1] in FRONT_DOOR_ROOMS:
        return parts[1]
    if parts[:1] != ["harness"] and layer(module) == FRONT_DOOR:
        return "cli"  # xmfu itself and `python -m xmfu`: the command's entry points
    return None


def _rank(name: str | None) -> int | None:
    if name is None:
        return None
    if name.startswith("results."):
        inner = name.partition(".")[2]
        return -RESULTS_ROOMS.index(inner) if inner in RESULTS_ROOMS else None
    return FRONT_DOOR_ROOMS.index(name) if name in FRONT_DOOR_ROOMS else None


def imports_back_up() -> list[str]:
    """Imports from a room to one above it, inside the front door or inside results/ (the layers' own rule is
    test_imports_point_one_way's)."""
    wrong = []
    for module, deps in graph().items():
        src = room(module)
        for dep in deps:
            dst = room(dep)
            if src is None or dst is None or src == dst or src.startswith("results.") != dst.startswith("results."):
                continue
            if _rank(dst) < _rank(src):
                wrong.append(f"{module} ({src}) imports {dep} ({dst})")
    return sorted(wrong)


def test_no_import_runs_back_up_inside_the_front_door_or_results():
    assert imports_back_up() == []


def test_every_room_is_known_and_says_what_it_may_import():
    rooms = {room(m) for m in graph()} - {None}
    assert {r for r in rooms if _rank(r) is None} == set()
    for name in [f"xmfu.harness.results.{r}" for r in RESULTS_ROOMS] + ["xmfu.harness.config", "xmfu.harness.fleet"]:
        doc = ast.get_docstring(ast.parse(sources()[name].read_text()))
        assert doc and "import" in doc.lower(), name


def test_rooms_hold_a_few_modules_and_modules_are_short():
    crowded = {}
    for folder in [p for pkg in FOLDERS for p in (ROOT / pkg).rglob("*") if (p / "__init__.py").exists()]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if folder.parent.name == "harness" or folder.name == "harness":
            continue  # the layers themselves (harness/, engine/, machine/) are measured elsewhere
        if len(modules) > MAX_ROOM_MODULES and folder.parent.name == "results":
            crowded[str(folder.relative_to(ROOT))] = len(modules)
    assert crowded == {}
    files = [p for pkg in (*FOLDERS, "xmfu", "tests", "benchmarks", "scripts", "examples")
             for p in (ROOT / pkg).rglob("*.py")]
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_the_engines_functions_are_short():
    """The engine reads as its steps: no function over MAX_ENGINE_FUNCTION_LINES (CaseRunner._row was 77 lines with
    a cyclomatic complexity of 43; it is now the row's sections in order, engine/row_sections.py)."""
    long = [f"{path.name}:{node.name} {node.end_lineno - node.lineno + 1} lines"
            for path in (ROOT / "harness" / "engine").glob("*.py")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_ENGINE_FUNCTION_LINES]
    assert long == []


# Where rows are still dicts by design: the code that writes them (the engine, the importers, the workloads' figure
# hooks the engine calls while a row is being written) and the code that checks them as written before anything is
# trusted (the validator, the re-derivations and the formulas the front door hands them). Everything else reads the
# typed records (results/schema/row.py Row) the reader gives.
ROW_BOUNDARY = ("harness/engine/", "harness/results/bundle/", "harness/results/rederive/", "harness/results/importers/",
                "harness/cli/formulas.py", "harness/machine/", "workloads/", "kernels/")
DIG = re.compile(r"\b(?:row|r)(?:\.get\(|\[)")  # row.get( row[ r.get( r[: issue 37's count
MAX_DIGS = 60


def dict_digs() -> dict[str, int]:
    out = {}
    for path in [p for pkg in (*FOLDERS, "xmfu") for p in (ROOT / pkg).rglob("*.py")]:
        relative = str(path.relative_to(ROOT))
        if not relative.startswith(ROW_BOUNDARY):
            n = len(DIG.findall(path.read_text()))
            if n:
                out[relative] = n
    return out


def test_rows_are_read_as_records_outside_the_reader_and_writer():
    """Issue 37: readers dug 607 times into row dicts; past the boundary they read Row's attributes. What is left
    digs into other dicts named like rows (compare's output lines, the references table's rows, telemetry
    readings); the count may only fall."""
    found = dict_digs()
    assert sum(found.values()) < MAX_DIGS, found


def test_the_dig_count_sees_a_dig(tmp_path):
    assert len(DIG.findall('x = row.get("a") + r["b"] + row["c"] + arrow[1] + r.get(2)')) == 4


def test_the_room_rule_can_fail():
    """A results room importing one above it, and the front door's suites importing the cli, are both caught."""
    assert _rank("results.render") < _rank("results.bundle") < _rank("results.schema")
    assert _rank("cli") < _rank("suites") < _rank("config")


def test_every_module_sits_in_a_known_layer():
    assert {layer(m) for m in graph()} <= set(ALLOWED)


def test_imports_point_one_way():
    wrong = []
    for module, deps in graph().items():
        for dep in deps:
            src, dst = layer(module), layer(dep)
            if src != dst and dst not in ALLOWED[src] and not _package_init(module, dep):
                wrong.append(f"{module} ({src}) imports {dep} ({dst})")
    assert not wrong, "\n".join(sorted(wrong))


def _package_init(module: str, dep: str) -> bool:
    """`harness/__init__` holds only the version; a module importing it imports no layer."""
    return dep == "xmfu.harness"


def test_no_import_circle():
    g = graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(g[node]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep] if dep in path else [node, dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for node in sorted(g):
        if node not in state:
            visit(node, [node])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("package", ["xmfu.harness.engine", "xmfu.harness.machine", "xmfu.harness.results",
                                     "xmfu.harness.cli", "xmfu.harness.suites", "xmfu.harness.config",
                                     "xmfu.harness.kernelcheck"])
def test_each_package_says_what_it_is_for_and_what_it_may_import(package):
    doc = ast.get_docstring(ast.parse(sources()[package].read_text()))
    assert doc and "import" in doc.lower()


def test_the_harness_folder_reads_as_the_architecture():
    """`ls harness/`: the front door in rooms (cli/, suites/, config/) beside the API and the run, then the engine,
    the machine and the results: no command, suite or composition module loose at the top."""
    rooms = {p.name for p in (ROOT / "harness").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    loose = {p.stem for p in (ROOT / "harness").glob("*.py")}
    assert rooms == {"cli", "kernelcheck", "fleet", "suites", "config", "engine", "machine", "results"}
    assert loose == {"__init__", "api", "run"}
    inside = {p.name for p in (ROOT / "harness" / "results").iterdir() if (p / "__init__.py").exists()}
    assert inside == set(RESULTS_ROOMS)


def test_nothing_imports_the_old_top_level_names():
    """harness, workloads and kernels are importable only as xmfu.harness...: an `import harness...` would work
    in a checkout (the repository root on sys.path) and fail once installed."""
    stale = []
    for module, path in sources().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            stale += [f"{module}: {n}" for n in names if n.split(".")[0] in OLD_NAMES]
    assert not stale, "\n".join(stale)


def test_the_checker_sees_lazy_imports_and_circles(tmp_path):
    """The walk must count an import inside a function body, or the rule above could not fail."""
    fake = tmp_path / "mod.py"
    runner = "xmfu.harness.engine.runner"
    fake.write_text("def f():\n    from xmfu.harness.engine import runner\n")
    assert imports_of(fake, "xmfu.harness.machine.mod", {runner}) == {runner}
    fake.write_text("f = Lazy('xmfu.harness.engine.runner', 'run')\n")
    assert imports_of(fake, "xmfu.harness.machine.mod", {runner}) == {runner}
