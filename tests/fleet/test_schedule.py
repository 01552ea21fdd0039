"""The link schedule: every round's pairs disjoint; exhaustive covers every pair in N-1 rounds (N for an odd N);
quick gives every node two partners in two rounds (three for an odd N)."""

from __future__ import annotations

import itertools

import pytest

from xmfu.harness.fleet import schedule


@pytest.mark.parametrize("n", range(2, 18))
def test_every_round_is_disjoint_and_exhaustive_covers_every_pair(n):
    rounds = schedule.exhaustive(n)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    for r in [*rounds, *schedule.quick(n)]:
        nodes = [x for pair in r for x in pair]
        assert len(nodes) == len(set(nodes))
    assert sorted(p for r in rounds for p in r) == list(itertools.combinations(range(n), 2))


@pytest.mark.parametrize("n", range(3, 18))
def test_quick_gives_every_node_its_two_ring_neighbours(n):
    rounds = schedule.quick(n)
    assert len(rounds) == (2 if n % 2 == 0 else 3)
    for i in range(n):
        assert sorted(schedule.partners(rounds, i)) == sorted({(i - 1) % n, (i + 1) % n})


def test_a_mode_that_is_not_known_is_refused():
    with pytest.raises(ValueError, match="allowed quick, exhaustive"):
        schedule.rounds("all", 4)
    assert schedule.rounds("quick", 1) == [] and schedule.rounds("quick", 2) == [[(0, 1)]]
