"""Interleaved rounds, the stop rule, and a failing backend not stopping the others."""

from __future__ import annotations

import itertools

from xmfu.harness.engine.sampler import sample_interleaved, stop_reason
from xmfu.harness.engine.settings import TimingConfig
from xmfu.harness.engine.timing import Series, copies_for_cold_cache, rotate


class FakeTimer:
    name = "fake"
    last_host_s = None

    def __init__(self, values, log, label):
        self.values, self.log, self.label = itertools.cycle(values), log, label

    def measure(self, fn, inner):
        fn()
        self.log.append(self.label)
        return next(self.values)


CFG = TimingConfig(warmup_s=0, warmup_min_iters=1, min_samples=6, max_samples=30, round_samples=2,
                   target_rel_ci=0.01, max_time_s=30, bootstrap_resamples=200)


def test_backends_take_turns_and_stop_on_ci():
    log: list[str] = []
    a = Series("a", lambda: None, FakeTimer([1.0], log, "a"))
    b = Series("b", lambda: None, FakeTimer([2.0], log, "b"))
    assert sample_interleaved([a, b], CFG) is False
    assert len(a.samples) == len(b.samples) == CFG.min_samples  # constant samples: CI is zero at min_samples
    sampled = log[2:]  # after one warm-up call each
    assert sampled[:4] == ["a", "a", "b", "b"] and sampled[4:8] == ["b", "b", "a", "a"]  # rotating order
    assert a.rounds == [0, 0, 1, 1, 2, 2]
    assert "CI half-width" in stop_reason(a, CFG, False)


def test_noisy_series_runs_to_max_samples():
    log: list[str] = []
    noisy = Series("n", lambda: None, FakeTimer([1.0, 3.0, 0.5, 2.0], log, "n"))
    sample_interleaved([noisy], CFG)
    assert len(noisy.samples) == CFG.max_samples
    assert "max_samples" in stop_reason(noisy, CFG, False)


def test_failure_in_one_series_leaves_the_other():
    def boom():
        raise RuntimeError("kernel fault")

    log: list[str] = []
    good = Series("good", lambda: None, FakeTimer([1.0], log, "g"))
    bad = Series("bad", boom, FakeTimer([1.0], log, "b"))
    sample_interleaved([good, bad], CFG)
    assert bad.error and "kernel fault" in bad.error
    assert len(good.samples) == CFG.min_samples


def test_rotate_and_cold_cache_copies():
    calls = rotate([lambda: 1, lambda: 2, lambda: 3])
    assert [calls() for _ in range(5)] == [1, 2, 3, 1, 2]
    assert copies_for_cold_cache(32 * 2**20, 8 * 2**20) == 8
    assert copies_for_cold_cache(None, 100) == 1
    assert copies_for_cold_cache(2**30, 1, limit=64) == 64
