"""Plug-in backends for tests/engine/test_plugins.py, named by import path (tests.engine.plugin_samples:NAME):
one that works (the built-in torch matmul under another name), and one of each way a plug-in can be wrong."""

from __future__ import annotations

from typing import Any

from xmfu.workloads.matmul import torch as builtin_matmul


class Matmul:
    workload = "matmul"
    frameworks = ("torch",)

    def available(self, case: Any, ctx: Any) -> tuple[bool, str]:
        return builtin_matmul.available(case, ctx)

    def prepare(self, case: Any, ctx: Any) -> Any:
        prepared = builtin_matmul.prepare(case, ctx)
        prepared.notes["library"] = "a test plug-in (torch.matmul)"
        return prepared


class RaisesOnLargeCases(Matmul):
    """Fails its 64-sized case only: that row fails, the run goes on."""

    def prepare(self, case: Any, ctx: Any) -> Any:
        if case.params()["m"] >= 64:
            raise RuntimeError("my kernel has no tile for m >= 64")
        return super().prepare(case, ctx)


class WrongSignature(Matmul):
    def available(self) -> tuple[bool, str]:  # type: ignore[override]
        return True, ""


class NoWorkload:
    def available(self, case: Any, ctx: Any) -> tuple[bool, str]:
        return True, ""

    def prepare(self, case: Any, ctx: Any) -> Any:
        raise AssertionError("never called")


class UnknownWorkload(Matmul):
    workload = "convolution"


class AttentionOnly(Matmul):
    workload = "attention"


class NeedsArguments(Matmul):
    def __init__(self, tile: int) -> None:
        self.tile = tile


class BadFrameworks(Matmul):
    frameworks = ("cuda",)


# A module-level object works as well as a class: an instance.
matmul = Matmul()
