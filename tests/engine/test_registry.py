"""Backends named by module path: imported on first use, once, and the frameworks a run's backends need."""

from __future__ import annotations

import sys

import pytest

from xmfu.harness.engine.registry import Implementation, Lazy, Registry, WorkloadDef


def test_lazy_imports_its_module_only_when_called(monkeypatch):
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    fn = Lazy("colorsys", "rgb_to_hsv")
    assert "colorsys" not in sys.modules
    assert fn(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0)
    assert "colorsys" in sys.modules and fn.resolve() is sys.modules["colorsys"].rgb_to_hsv


def test_lazy_factory_is_called_once_with_its_arguments():
    made = Lazy("functools", "partial", (max, 3))
    assert made(5) == 5 and made(1) == 3
    assert made.resolve() is made.resolve()
    assert repr(made) == "Lazy(functools.partial(<built-in function max>, 3))"


def test_a_wrong_name_fails_when_used_naming_it():
    with pytest.raises(ModuleNotFoundError, match=r"workloads\.nothing"):
        Lazy("workloads.nothing", "prepare")()
    with pytest.raises(AttributeError, match="no_such"):
        Lazy("colorsys", "no_such")()


def test_the_frameworks_of_the_chosen_backends_in_detection_order():
    def impl(name, frameworks):
        return Implementation(name, lambda c, x: (True, ""), lambda c, x: None, frameworks)

    registry = Registry()
    registry.add(WorkloadDef("w", lambda *a: [], {"t": impl("t", ("torch",)), "j": impl("j", ("jax",)),
                                                  "any": Implementation("any", None, None)}))
    assert registry.frameworks([("w", "j")]) == ("jax",)
    assert registry.frameworks([("w", "j"), ("w", "t")]) == ("torch", "jax")
    assert registry.frameworks([("w", "any")]) == ("torch", "jax")  # undeclared: ask every framework
