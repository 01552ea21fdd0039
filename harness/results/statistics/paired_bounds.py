"""The paired block bootstrap of many speedups at once, as `xmfu validate` redraws every stated speedup of a
bundle: what speedup.paired_speedup_draws and np.quantile give one pair at a time, value for value, with the pairs
that share a shape drawn together and each draw's medians counted rather than sorted (a bundle of 2,000 speedups
cost most of its validation in per-pair numpy calls, then in sorting every draw: issue 42 item 5)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from xmfu.harness.results.statistics.speedup import paired_speedup_draws, round_blocks, sorted_middles

PairedSamples = tuple  # (samples, rounds) or (samples, rounds, repeats), as paired_speedup_draws takes them
CHUNK_VALUES = 250_000  # draws held at once by paired_speedup_bounds: its small counters stay in a core's cache


def paired_speedup_bounds(pairs: Sequence[tuple[PairedSamples, PairedSamples]], resamples: int, q: Sequence[float],
                          seed: int = 0) -> list[tuple[float, np.ndarray, int] | None]:
    """For each (base, cand) pair: (speedup, the `q` quantiles of its log-speedup draws, paired rounds), or None
    without a shared round: what `paired_speedup_draws` and np.quantile give one pair at a time, value for value
    (what `xmfu validate` checks every stated speedup against). A generator seeded alike draws the same rounds
    for every pair of one repeat and R rounds, so such pairs whose rounds all hold as many samples (no padding)
    are drawn together (`_drawn_medians`: a bundle of 2,000 speedups cost most of its validation in the per-pair
    numpy calls, then in sorting every draw). The others go one at a time."""
    out: list[tuple[float, np.ndarray, int] | None] = [None] * len(pairs)
    groups: dict[tuple[int, int, int], list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for i, (base, cand) in enumerate(pairs):
        shaped = _evenly_blocked(base, cand)
        if shaped is None:
            found = paired_speedup_draws(base, cand, resamples, seed)
            if found is not None:
                out[i] = (found[0], np.quantile(found[1], q), found[2])
            continue
        b, c = shaped
        groups.setdefault((b.shape[0], b.shape[1], c.shape[1]), []).append((i, b, c))
    for (rounds, _, _), members in groups.items():
        picks = np.random.default_rng(seed).integers(0, rounds, size=(resamples, rounds))
        counts = np.zeros((rounds, resamples), dtype=np.int64)  # counts[r, d]: how often draw d picks round r
        np.add.at(counts, (picks, np.arange(resamples)[:, None]), 1)
        per_chunk = max(1, CHUNK_VALUES // resamples)
        for start in range(0, len(members), per_chunk):
            chunk = members[start:start + per_chunk]
            b, c = np.stack([m[1] for m in chunk]), np.stack([m[2] for m in chunk])
            draws = np.log(_drawn_medians(b, counts) / _drawn_medians(c, counts))
            values = _middles(b.reshape(len(chunk), -1)) / _middles(c.reshape(len(chunk), -1))  # sorts b, c: last
            bounds = np.quantile(draws, q, axis=1).T
            for (i, _, _), value, bound in zip(chunk, values, bounds, strict=True):
                # paired_speedup_draws' exp of the mean of one repeat's log: the value itself, to the last bit
                out[i] = (math.exp(math.log(value)), bound, rounds)
    return out


def _drawn_medians(blocks: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The median of each draw's values for each of P contenders: `blocks` (P, R rounds, k samples each), `counts`
    (R, D draws) how often each draw picks each round. What sorting each draw's R x k values (blocks[:, picks])
    and taking np.median's two middle values gives, bit for bit, without building or sorting the draws: each
    contender's values are sorted once, and a draw's median is the value at which its running count of picked
    values (each value counted as often as its round is picked) passes the middle positions. R x k steps over
    (P, D) counters, against sorting P x D x R x k values (0.05 against 0.29 s CPU for 2,000 contenders of 10
    rounds of one sample and 1,000 draws, this project's machine, 3 December 2026)."""
    p, rounds, k = blocks.shape
    flat = blocks.reshape(p, rounds * k)
    order = np.argsort(flat, axis=1, kind="stable")
    ordered = np.take_along_axis(flat, order, axis=1)
    n = rounds * k  # values in every draw (R rounds of k): no counter exceeds it
    kind = next(t for t in (np.int8, np.int16, np.int64) if n < np.iinfo(t).max)
    per_round, round_of = counts.astype(kind), order // k
    passed = np.zeros((p, counts.shape[1]), dtype=kind)  # picked values up to the j-th smallest, per draw
    low, high = np.zeros_like(passed), np.zeros_like(passed)  # sorted positions of the two middle values
    below, taken = np.empty(passed.shape, dtype=bool), np.empty_like(passed)
    for j in range(n):  # in place: no (P, D) array made per step; a bool counts as an int8 where the counters are
        np.take(per_round, round_of[:, j], axis=0, out=taken)
        passed += taken
        for counter, middle in ((low, (n - 1) // 2), (high, n // 2)):
            np.less_equal(passed, middle, out=below)
            counter += below.view(np.int8) if kind is np.int8 else below
    if n <= PAIR_TABLE_VALUES:  # each pair's mean computed once, then one gather per draw rather than two and a sum
        means = ((ordered[:, :, None] + ordered[:, None, :]) / 2).reshape(-1)  # the same sum and halving, per pair
        code = low.astype(np.intp)
        code *= n
        code += high
        code += (np.arange(p, dtype=np.intp) * (n * n))[:, None]
        return np.take(means, code)
    at = np.arange(p)[:, None]
    return (ordered[at, low] + ordered[at, high]) / 2  # np.median's mean of the two middle values


# Up to this many values per draw, `_drawn_medians` tabulates each contender's n x n pair means (16 x 16 doubles)
# and reads a draw's median from the table: for 2,000 contenders of 10 rounds and 1,000 draws, 29 against 14 ms
# CPU (this project's machine, 3 December 2026); past it the table outgrows the gathers it saves.
PAIR_TABLE_VALUES = 16


def _evenly_blocked(base: PairedSamples, cand: PairedSamples) -> tuple[np.ndarray, np.ndarray] | None:
    """The two contenders' shared rounds as (rounds, samples per round) arrays, where there is one repeat and every
    round of each holds as many samples; else None (`paired_speedup_bounds` draws such a pair alone)."""
    b, c = _one_per_round(base), _one_per_round(cand)
    if b is not None and c is not None and len(b) == len(c):  # most rows: rounds 0..R-1 of one sample each
        return b[:, None], c[:, None]
    b_blocks, c_blocks = round_blocks(*base), round_blocks(*cand)
    shared = sorted(set(b_blocks) & set(c_blocks))
    if not shared or len({k for k, _ in shared}) != 1:
        return None
    b, c = [b_blocks[x] for x in shared], [c_blocks[x] for x in shared]
    if len({len(x) for x in b}) != 1 or len({len(x) for x in c}) != 1:
        return None
    return np.asarray(b, dtype=np.float64), np.asarray(c, dtype=np.float64)


def _one_per_round(paired: PairedSamples) -> np.ndarray | None:
    """The samples of (samples, rounds[, repeats]) whose rounds are 0, 1, ... in turn, one sample each, in one
    repeat: those rounds' blocks, in order, without building them one by one; else None."""
    samples, rounds = paired[0], paired[1]
    repeats = paired[2] if len(paired) > 2 else None
    if type(rounds) is not list or not rounds or rounds != list(range(len(rounds))) or len(samples) != len(rounds):
        return None
    if repeats is not None and (type(repeats) is not list or repeats.count(repeats[0]) != len(repeats)):
        return None
    return np.asarray(samples, dtype=np.float64)


def _middles(m: np.ndarray) -> np.ndarray:
    """The median along the last axis of values without NaN: `row_nanmedians` for any number of leading axes. `m`
    is sorted in place (the callers hand in arrays of their own: a copy costs as much as a sort)."""
    m.sort(axis=-1)
    return sorted_middles(m)
