"""How many nodes (hosts) a run's processes took part on: the manifest's `process.nodes`.

A single process is one node. A multi-process torch.distributed run (the collectives and transformer workloads)
has every rank send its hostname to every other while preparing a case (the rows' `notes.rank_map`: rank -> [host,
local rank, device]), so rank 0 counts the distinct hosts. A run whose ranks never exchanged their hosts (a JAX
multi-process run, a run stopped before its first distributed case) records null: the count is not measured, and
public references matched on nodes (harness/machine/references.py MATCHED_ON) find none for it.

Hosts are told apart by hostname: two containers on different machines sharing one hostname count as one node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xmfu.harness.results.schema.row import Row


def hosts_of(notes: Any) -> set[str] | None:
    """The distinct hostnames of a row's rank map (its notes' `rank_map`), or None where the row has none."""
    rank_map = notes.get("rank_map") if isinstance(notes, Mapping) else None
    if not isinstance(rank_map, list) or not rank_map:
        return None
    hosts = {str(r[0]) for r in rank_map if isinstance(r, (list, tuple)) and r and r[0] is not None}
    return hosts or None


def of_run(world_size: int, rows: Sequence[Mapping[str, Any]]) -> int | None:
    """The run's node count: 1 for a single process, else the distinct hosts of its rows' rank maps (their
    union: every case of one run has the same processes), or None where no row recorded them. `rows`: as written
    (the engine's, and the validator's before any record is trusted)."""
    if world_size == 1:
        return 1
    seen = [h for h in (hosts_of(r.get("notes")) for r in rows) if h is not None]
    return len(set().union(*seen)) if seen else None


def of_row(row: Row) -> int | None:
    """A training or collectives row's own node count: 1 on one device, else its rank map's hosts."""
    if (row.params.get("world_size") or row.ranks or 1) == 1:
        return 1
    hosts = hosts_of(row.notes)
    return len(hosts) if hosts else None


def of_manifest(manifest: Mapping[str, Any]) -> int | None:
    """The node count a bundle records (validated by `problems`), or None: not recorded (or an older bundle)."""
    n = (manifest.get("process") or {}).get("nodes")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def problems(manifest: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], where: str) -> list[str]:
    """The manifest's node count against the run's processes: at least 1 (the schema), no more than its
    world_size, 1 for a single process, and the hosts its rows' rank maps name where they name any."""
    process = manifest.get("process") or {}
    n, world = of_manifest(manifest), process.get("world_size")
    if n is None or not isinstance(world, int):
        return []
    if n > world:
        return [f"{where}: process.nodes {n} is more than the run's world_size {world}: each node runs a process"]
    derived = of_run(world, rows)
    if derived is not None and derived != n:
        return [f"{where}: process.nodes {n} is not what the run says: "
                + ("a single process is one node" if world == 1 else
                   f"its rows' rank maps name {derived} distinct host(s)")]
    return []
