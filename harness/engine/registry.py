"""(workload, backend) -> implementation, registered explicitly by name.

Workloads register themselves through the allow-list the CLI loads (workloads/catalog.py); the
engine looks implementations up here and never imports a workload module. The allow-list names each backend's
functions by module path (`Lazy`): a backend module imports its framework (torch, JAX, Triton) at the top, and
only the backends a run chooses may pay for that, so `xmfu peaks` or a JAX-only run never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from xmfu.harness.engine.case import Case, Prepared
from xmfu.harness.engine.context import RunContext
from xmfu.harness.machine.platform import FRAMEWORKS, DeviceInfo

Availability = tuple[bool, str]


class Lazy:
    """A function named by module path and imported on its first call: `module.name`, or, given `args`, what the
    factory `module.name(*args)` returns (e.g. attention's `make_prepare("flash")`)."""

    def __init__(self, module: str, name: str, args: tuple[Any, ...] | None = None) -> None:
        self.module, self.name, self.args = module, name, args
        self._target: Callable[..., Any] | None = None

    def resolve(self) -> Callable[..., Any]:
        """Import the module (once) and return the function; ImportError/AttributeError name what is wrong."""
        if self._target is None:
            found = getattr(importlib.import_module(self.module), self.name)
            self._target = found if self.args is None else found(*self.args)
        return self._target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        made = "" if self.args is None else f"({', '.join(map(repr, self.args))})"
        return f"Lazy({self.module}.{self.name}{made})"


@dataclass(frozen=True)
class Implementation:
    """One backend of one workload: `available` answers (ok, reason); `prepare` builds the callable.
    `frameworks`: what it computes with (torch, jax): platform detection asks only those (FRAMEWORKS when not
    said: all of them)."""

    backend: str
    available: Callable[[Case, RunContext], Availability]
    prepare: Callable[[Case, RunContext], Prepared]
    frameworks: tuple[str, ...] = FRAMEWORKS
    # a plug-in's provenance (engine/plugins.py: its object, distribution and version); None for a built-in
    plugin: Mapping[str, Any] | None = None
    # set: on a CPU this backend runs only when the config names it (why, e.g. a compile of tens of seconds per
    # case), so `backends: null` (a smoke run, make bench) stays seconds; its row says how to run it
    cpu_when_named: str = ""


@dataclass(frozen=True)
class WorkloadDef:
    """A workload: how its config expands into cases, and its implementations by backend name."""

    name: str
    expand: Callable[[Mapping[str, Any], str, int], Sequence[Case]]
    implementations: Mapping[str, Implementation] = field(default_factory=dict)
    summarize: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None  # run-level figures from rows
    # the cases as the run's device takes them (e.g. matmul's fp8 format); None: the device changes nothing
    for_device: Callable[[Sequence[Case], DeviceInfo], Sequence[Case]] | None = None
    # figures of a finished row against itself and the run's earlier rows (e.g. a scaling efficiency against a
    # baseline row of the same run), merged into the row before it is written; None: nothing to derive
    derive: Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]] | None = None
    # the frozen dataclass declaring its `workload.*` settings (harness/engine/declare.py), which `expand` parses and
    # Hydra composes configs/workload/<name>.yaml on; None: a workload composed in code (the Python API's)
    settings: type | None = None

    def cases(self, config: Mapping[str, Any], dtype: str, seed: int,
              device: DeviceInfo | None = None) -> Sequence[Case]:
        """The config's cases; fitted to `device` when given (None: config validation, before detection)."""
        cases = self.expand(config, dtype, seed)
        return self.for_device(cases, device) if device is not None and self.for_device else cases


class Registry:
    def __init__(self) -> None:
        self._workloads: dict[str, WorkloadDef] = {}
        self._builtin: dict[str, tuple[str, ...]] = {}

    def add(self, workload: WorkloadDef) -> None:
        if workload.name in self._workloads:
            raise ValueError(f"workload {workload.name!r} registered twice")
        self._workloads[workload.name] = replace(workload, implementations=dict(workload.implementations))
        self._builtin[workload.name] = tuple(workload.implementations)

    def add_backend(self, workload: str, implementation: Implementation) -> None:
        """A plug-in backend (engine/plugins.py) joins a registered workload; its name must be new there."""
        impls = self._workloads[workload].implementations
        if implementation.backend in impls:
            raise ValueError(f"backend {implementation.backend!r} of {workload!r} registered twice")
        impls[implementation.backend] = implementation  # type: ignore[index]  # add() made it a dict

    def builtin_backends(self, workload: str) -> tuple[str, ...]:
        """The workload's backends as registered with it (the catalog's), plug-ins not included."""
        return self._builtin[workload]

    def workload(self, name: str) -> WorkloadDef:
        return self._workloads[name]

    def backends_by_workload(self) -> dict[str, list[str]]:
        return {name: list(w.implementations) for name, w in self._workloads.items()}

    def frameworks(self, chosen: Iterable[tuple[str, str]]) -> tuple[str, ...]:
        """The frameworks the chosen (workload, backend) pairs compute with, in FRAMEWORKS' order."""
        used = {f for workload, backend in chosen for f in self.workload(workload).implementations[backend].frameworks}
        return tuple(f for f in FRAMEWORKS if f in used)
