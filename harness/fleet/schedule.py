"""Which node pairs test their link in which round: every round a set of disjoint pairs, run at the same time.

`exhaustive`: every one of the N(N-1)/2 pairs, in N-1 rounds for an even N (N rounds for an odd one, one node
resting each round), by the circle method of round-robin tournaments (one node fixed, the others rotating: Kirkman
1847; E. Lucas, Récréations mathématiques vol. 2, 1883, "Les jeux de demoiselles"). `quick`: each node with two
others, its neighbours on a ring, in two rounds of disjoint pairs (a third for the odd node out), as gcm's
`check-nccl --pairwise-quick` tests a node against a few peers instead of all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

PAIR_MODES = ("quick", "exhaustive")
Pair = tuple[int, int]  # indices into the job's node list, lower first


def _pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def exhaustive(n: int) -> list[list[Pair]]:
    """Every pair of n nodes, in rounds of disjoint pairs (the circle method)."""
    if n < 2:
        return []
    slots = list(range(n)) + ([-1] if n % 2 else [])  # -1: the rest slot of an odd count
    m = len(slots)
    rounds = []
    for _ in range(m - 1):
        pairs = [_pair(slots[i], slots[m - 1 - i]) for i in range(m // 2) if -1 not in (slots[i], slots[m - 1 - i])]
        rounds.append(sorted(pairs))
        slots = [slots[0], slots[-1], *slots[1:-1]]  # rotate all but the first
    return rounds


def quick(n: int) -> list[list[Pair]]:
    """Each node with its two ring neighbours: (0,1), (2,3)... then (1,2), (3,4)..., (n-1, 0); for an odd n the
    ring's closing edge (n-1, 0) goes in a third round. Every node tests two links (two nodes: one)."""
    if n < 2:
        return []
    if n == 2:
        return [[(0, 1)]]
    edges = [_pair(i, (i + 1) % n) for i in range(n)]
    first = [e for i, e in enumerate(edges) if i % 2 == 0 and i != n - 1]
    second = [e for i, e in enumerate(edges) if i % 2 == 1]
    rest = [edges[n - 1]] if n % 2 else []
    return [sorted(r) for r in (first, second, rest) if r]


def rounds(mode: str, n: int) -> list[list[Pair]]:
    if mode not in PAIR_MODES:
        raise ValueError(f"pairs mode {mode!r}: allowed {', '.join(PAIR_MODES)}")
    return quick(n) if mode == "quick" else exhaustive(n)


def partners(schedule: Sequence[Sequence[Pair]], node: int) -> list[int]:
    """The nodes `node` tests a link with, in the order of the rounds."""
    return [b if a == node else a for r in schedule for a, b in r if node in (a, b)]
