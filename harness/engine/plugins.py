"""Plug-in backends: a kernel of the user's own, run beside the built-in backends of a workload.

A plug-in is any object (a class, an instance, a module) with the built-ins' contract (docs/backends.md):

    workload: str                      the workload it implements ("attention", "matmul", ...)
    available(case, ctx) -> (bool, str)  can it run this case here; the reason when not (the row is skipped)
    prepare(case, ctx) -> Prepared     the zero-argument callable to time, how to read its result, its framework
    frameworks: tuple[str, ...]        optional: what it computes with ("torch" or "jax"); default both

It joins a run two ways, both only when the run names it (`backends: null` stays the built-ins, so installing a
package never changes what a default run measures):
- by import path, `backends=[torch_sdpa,my_pkg.attention:MyFlash]`: the module is imported from sys.path;
- by entry point: an installed package declares `NAME = "module:object"` in the group `xmfu.backends`
  (importlib.metadata entry points, the Python packaging spec's), and `backends=[NAME]` runs it.
Its rows carry `plugin` (the object, its distribution and version), which also joins their comparability key: a
new release of the kernel starts a new series. Nothing is imported until a run names the plug-in (or `xmfu
doctor` checks the installed ones); what cannot be loaded or does not fit the contract is a ConfigError (one
paragraph, exit 2).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.recheck import reader_for_plugin
from xmfu.harness.engine.registry import Implementation, Registry
from xmfu.harness.machine.platform import FRAMEWORKS

GROUP = "xmfu.backends"
CONTRACT = ("an object with `workload` (a workload's name), `available(case, ctx)` and `prepare(case, ctx)`, and "
            "optionally `frameworks` (docs/backends.md)")


@dataclass(frozen=True)
class Installed:
    """An entry point of the `xmfu.backends` group, as installed (nothing imported)."""

    name: str
    value: str  # module:object
    package: str | None
    version: str | None

    def describe(self) -> str:
        made = f"{self.package} {self.version}" if self.package else "no distribution"
        return f"{self.name} ({made}: {self.value})"


def installed() -> list[Installed]:
    """The installed packages' plug-in backends, by name (importlib.metadata: reads metadata, imports nothing)."""
    import importlib.metadata  # here, not at the top: 19 ms of every `xmfu` start, for the commands that ask

    out = []
    for ep in importlib.metadata.entry_points(group=GROUP):
        dist = getattr(ep, "dist", None)
        out.append(Installed(ep.name, ep.value, dist.metadata["Name"] if dist else None,
                             dist.version if dist else None))
    return sorted(out, key=lambda i: i.name)


def is_import_path(name: str) -> bool:
    return ":" in name


def register_named(registry: Registry, data: Mapping[str, Any]) -> list[str]:
    """Register into `registry` every plug-in the config `data` names in `backends` or `baseline` for its
    workload (built-in names are left alone); returns the plug-in names registered. Raises ConfigError."""
    workload = data.get("workload") if isinstance(data.get("workload"), Mapping) else {}
    name = workload.get("name")
    if name not in registry.backends_by_workload():
        return []  # the config check names the unknown workload
    builtins = set(registry.builtin_backends(name))
    chosen = data.get("backends")
    named = [chosen] if isinstance(chosen, str) else list(chosen) if isinstance(chosen, (list, tuple)) else []
    if isinstance(data.get("baseline"), str):
        named.append(data["baseline"])
    entry_points = {i.name: i for i in installed()}
    added = []
    for backend in dict.fromkeys(b for b in named if isinstance(b, str)):
        if backend in builtins:
            if backend in entry_points:
                raise ConfigError("backends", f"{backend!r} is a built-in {name} backend, and the installed plug-in "
                                  f"{entry_points[backend].describe()} has the same name: the name would be "
                                  "ambiguous", f"the built-in under its name; the plug-in once its package gives "
                                  "its entry point another name (or by import path, "
                                  f"backends=[{entry_points[backend].value}])")
            continue
        if backend in registry.backends_by_workload()[name]:
            continue  # registered already (the same registry validates, then runs)
        if is_import_path(backend):
            impl = load(backend, name, registry, source=None)
        elif backend in entry_points:
            impl = load(entry_points[backend].value, name, registry, source=entry_points[backend], as_name=backend)
        else:
            continue  # the config check refuses it, listing what is allowed
        registry.add_backend(name, impl)
        added.append(backend)
    return added


def load(path: str, workload: str, registry: Registry, source: Installed | None,
         as_name: str | None = None) -> Implementation:
    """The plug-in `module:object` as an Implementation of `workload`, checked against the contract."""
    name = as_name or path
    where = f"the plug-in backend {name!r}" + (f" (entry point of {source.package} {source.version})"
                                              if source and source.package else "")
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError("backends", f"{name!r} is not an import path", "module.path:object, e.g. "
                          "my_pkg.attention:MyFlash")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any error importing the user's module is theirs to read, in one paragraph
        raise ConfigError("backends", f"{where} cannot be imported: {type(exc).__name__}: {_one_line(exc)}",
                          "a module importable here (installed, or on PYTHONPATH)") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError("backends", f"{where}: module {module_name} has no {attr!r}", CONTRACT)
        obj = getattr(obj, part)
    if inspect.isclass(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise ConfigError("backends", f"{where}: {attr}() raised {type(exc).__name__}: {_one_line(exc)}",
                              "a class that takes no arguments, or an instance") from None
    _check_contract(obj, where, workload, registry)
    frameworks = tuple(getattr(obj, "frameworks", FRAMEWORKS))
    return Implementation(name, obj.available, _reading(obj.prepare), frameworks,
                          plugin=provenance(path, module, source))


def _reading(prepare: Callable[..., Any]) -> Callable[..., Any]:
    """The plug-in's prepare, its Prepared given the array reader where it declares no `output`: the output of its
    last timed call is then re-checked as the array the call returned (engine/recheck.py). A plug-in cannot opt out
    of the re-check by saying nothing."""
    def prepared(case: Any, ctx: Any) -> Any:
        return reader_for_plugin(prepare(case, ctx))

    return prepared


def _check_contract(obj: Any, where: str, workload: str, registry: Registry) -> None:
    declared = getattr(obj, "workload", None)
    workloads = sorted(registry.backends_by_workload())
    if not isinstance(declared, str):
        raise ConfigError("backends", f"{where} does not say its workload (no `workload` string)", CONTRACT)
    if declared not in workloads:
        raise ConfigError("backends", f"{where} is for workload {declared!r}, which xmfu does not have",
                          ", ".join(workloads))
    if declared != workload:
        raise ConfigError("backends", f"{where} is a {declared} backend; this run's workload is {workload}",
                          f"plug-ins for {workload}, or workload={declared}")
    for method in ("available", "prepare"):
        _check_callable(getattr(obj, method, None), method, where)
    frameworks = getattr(obj, "frameworks", FRAMEWORKS)
    if isinstance(frameworks, str) or not isinstance(frameworks, Iterable) or not frameworks \
            or any(f not in FRAMEWORKS for f in frameworks):
        raise ConfigError("backends", f"{where}: frameworks {frameworks!r} is not a list of frameworks",
                          f"a non-empty tuple drawn from {list(FRAMEWORKS)}")


def _check_callable(fn: Callable[..., Any] | None, method: str, where: str) -> None:
    if not callable(fn):
        raise ConfigError("backends", f"{where} has no callable `{method}`", CONTRACT)
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        shown = inspect.signature(fn).replace(return_annotation=inspect.Signature.empty)
        raise ConfigError("backends", f"{where}: `{method}{shown}` cannot be called as {method}(case, ctx)",
                          CONTRACT) from None
    except ValueError:  # a builtin without a signature: called as it is
        return


def provenance(path: str, module: Any, source: Installed | None) -> dict[str, Any]:
    """Where the plug-in's code comes from: its distribution and version (from the entry point, or the
    distribution that provides its top-level package), else the file it was imported from."""
    package, version = (source.package, source.version) if source else _distribution(path.partition(":")[0])
    out: dict[str, Any] = {"object": path, "package": package, "version": version,
                           "entry_point": source.name if source else None}
    if package is None:
        out["file"] = str(Path(getattr(module, "__file__", "") or "").resolve()) or None
        out["module_version"] = getattr(module, "__version__", None)
    return out


@functools.lru_cache(maxsize=1)
def _distributions() -> Mapping[str, list[str]]:
    """Top-level module -> the distributions providing it: a scan of every installed package's metadata (1-2 s on
    a loaded 2-core machine), done once per process, not once per plug-in named."""
    import importlib.metadata

    return importlib.metadata.packages_distributions()


def _distribution(module_name: str) -> tuple[str | None, str | None]:
    import importlib.metadata

    top = module_name.split(".")[0]
    names = _distributions().get(top) or []
    if not names:
        return None, None
    try:
        return names[0], importlib.metadata.version(names[0])
    except importlib.metadata.PackageNotFoundError:
        return names[0], None


def placeholder(registry: Registry, data: Mapping[str, Any]) -> None:
    """For reading a bundle (`xmfu validate` re-plans its config): the config's plug-in names registered without
    importing them, so a bundle written with a plug-in is checked where the plug-in is not installed."""
    workload = data.get("workload") if isinstance(data.get("workload"), Mapping) else {}
    name = workload.get("name")
    if name not in registry.backends_by_workload():
        return
    chosen = data.get("backends")
    named = [chosen] if isinstance(chosen, str) else list(chosen) if isinstance(chosen, (list, tuple)) else []
    known = set(registry.backends_by_workload()[name])
    for backend in dict.fromkeys(b for b in [*named, data.get("baseline")] if isinstance(b, str)):
        if backend not in known:
            registry.add_backend(name, Implementation(backend, _not_loaded, _not_loaded, FRAMEWORKS,
                                                      plugin={"object": backend, "loaded": False}))


def _not_loaded(*_: Any) -> Any:
    raise RuntimeError("a plug-in registered to read a bundle is not run")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:400]



def register_installed(registry: Registry) -> list[dict[str, Any]]:
    """`xmfu doctor`: every installed plug-in imported, checked against the contract and, where it fits, registered
    with its workload (so its `available` is asked like a built-in's). One record per plug-in: name, package,
    version, object, workload, and `problem` where it cannot be used."""
    out = []
    for entry in installed():
        record: dict[str, Any] = {"name": entry.name, "package": entry.package, "version": entry.version,
                                  "object": entry.value, "workload": None, "problem": None}
        try:
            workload = _declared_workload(entry)
            record["workload"] = workload
            if entry.name in registry.backends_by_workload().get(workload, ()):
                raise ConfigError("backends", f"the plug-in {entry.describe()} has the name of a built-in "
                                  f"{workload} backend", "a name of its own")
            registry.add_backend(workload, load(entry.value, workload, registry, entry, as_name=entry.name))
        except ConfigError as exc:
            record["problem"] = exc.problem + (f". Allowed: {exc.allowed}" if exc.allowed else "")
        out.append(record)
    return out


def _declared_workload(entry: Installed) -> str:
    """The workload a plug-in says it implements (importing it); a plug-in that says none is checked against a
    workload that cannot be its own, so the contract check names what is missing."""
    module_name, _, attr = entry.value.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise ConfigError("backends", f"the plug-in {entry.describe()} cannot be imported: {type(exc).__name__}: "
                          f"{_one_line(exc)}", "a module importable here") from None
    declared = getattr(obj, "workload", None)
    if not isinstance(declared, str):
        raise ConfigError("backends", f"the plug-in {entry.describe()} does not say its workload (no `workload` "
                          "string)", CONTRACT)
    return declared
