"""Three cheating plug-ins (tests/engine/test_cheats.py names them by import path, tests.engine.cheats:NAME), each
a trick a live leaderboard received: an output cached by its inputs' fingerprint (GPU MODE reference-kernels #160),
an output deferred into the untimed check (#161), a replaced timer (#159, #162). Each computes matmul for real when
checked before timing, so only what happens to its timed calls can give it away."""

from __future__ import annotations

import time
from typing import Any

from xmfu.harness.engine.case import Prepared
from xmfu.harness.machine.frameworks import torch_rows


class _Matmul:
    workload = "matmul"
    frameworks = ("torch",)

    def available(self, case: Any, ctx: Any) -> tuple[bool, str]:
        plain = case.dtype == "fp32" and not (case.transpose_a or case.transpose_b)
        return (True, "") if plain else (False, "the cheats take plain fp32 matmuls only")

    @staticmethod
    def _inputs(case: Any) -> tuple[Any, Any, Any]:
        """A and B as torch tensors, and the fresh_inputs hook writing new ones into them (a cheat obliges: it
        hopes its trick outlives the new values)."""
        import torch

        a, b = (torch.from_numpy(x.copy()) for x in case.stored_inputs())

        def fresh(new: Any) -> None:
            for stored, values in zip((a, b), new.stored_inputs(), strict=True):
                stored.copy_(torch.from_numpy(values))

        return a, b, fresh


class CachedOutput(_Matmul):
    """Computes once per input fingerprint (which buffers, not what they hold), then answers from the cache."""

    def prepare(self, case: Any, ctx: Any) -> Prepared:
        a, b, fresh = self._inputs(case)
        cache: dict[tuple, Any] = {}

        def call() -> Any:
            key = (a.data_ptr(), b.data_ptr(), tuple(a.shape), tuple(b.shape))
            if key not in cache:
                cache[key] = a @ b
            return cache[key]

        return Prepared(call, lambda rows: torch_rows(call(), rows), "torch", fresh_inputs=fresh)


class DeferredOutput(_Matmul):
    """The timed call returns the output buffer at once; the untimed check computes what it holds."""

    def prepare(self, case: Any, ctx: Any) -> Prepared:
        import torch

        a, b, fresh = self._inputs(case)
        out = torch.zeros(case.m, case.n)

        def result(rows: Any) -> Any:
            torch.matmul(a, b, out=out)
            return torch_rows(out, rows)

        return Prepared(lambda: out, result, "torch", fresh_inputs=fresh)


class ReplacedTimer(_Matmul):
    """Computes honestly, but slows the clock the host timer reads (time.perf_counter) a millionfold (a thousandfold
    left a call slowed 1000x by a loaded machine within the floor)."""

    real_clock = time.perf_counter

    def prepare(self, case: Any, ctx: Any) -> Prepared:
        a, b, fresh = self._inputs(case)
        real = ReplacedTimer.real_clock
        origin = real()
        time.perf_counter = lambda: origin + (real() - origin) / 1e6
        return Prepared(lambda: a @ b, lambda rows: torch_rows(a @ b, rows), "torch", fresh_inputs=fresh)
