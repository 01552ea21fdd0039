"""A JAX namespace as JAX 0.4.x-0.6.0 had it: no top-level `jax.shard_map`, only
`jax.experimental.shard_map.shard_map(f, mesh, in_specs, out_specs, check_rep=True, auto=frozenset())`
(signature copied from jax-ml/jax tag jax-v0.4.30, jax/experimental/shard_map.py; the same through jax-v0.6.0;
`jax.shard_map` with keyword-only `mesh`, `in_specs`, `out_specs`, `check_vma` appeared in jax-v0.6.1).
"""

from __future__ import annotations

import types
from typing import Any


def legacy_jax(monkeypatch: Any, name: str = "fakejax") -> types.ModuleType:
    """Register `name`, `name.experimental` and `name.experimental.shard_map` as modules; the returned module
    records every shard_map call in `.calls`."""
    import sys

    top = types.ModuleType(name)
    experimental = types.ModuleType(f"{name}.experimental")
    legacy = types.ModuleType(f"{name}.experimental.shard_map")
    top.calls = []

    def shard_map(f, mesh, in_specs, out_specs, check_rep=True, auto=frozenset()):
        top.calls.append({"f": f, "mesh": mesh, "in_specs": in_specs, "out_specs": out_specs,
                          "check_rep": check_rep, "auto": auto})
        return f

    legacy.shard_map = shard_map
    experimental.shard_map = legacy
    top.experimental = experimental
    for module in (top, experimental, legacy):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return top
