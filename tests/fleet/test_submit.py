"""Waiting for the fleet's job is bounded: by the queue limit while it has not started, by its time limit and a grace
once it runs; progress is said as steps end."""

from __future__ import annotations

import itertools
from pathlib import Path

from xmfu.harness.fleet import slurm, submit


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _wait(tmp_path: Path, monkeypatch, states, minutes: int = 10, queue_limit_s: float = 600.0):
    (tmp_path / "steps").mkdir()
    states = itertools.chain(states, itertools.repeat(states[-1]))
    monkeypatch.setattr(slurm, "state", lambda job: next(states))
    clock, said = Clock(), []
    sub = submit.Submitted("7", tmp_path / "job-1.sbatch", ("node-${NODES[0]}", "pair-a-b"), minutes, 0.0)
    end = submit.wait(tmp_path, sub, queue_limit_s, said.append, clock, clock.sleep)
    return end, said, clock.now


def test_a_job_that_ends_is_followed_to_its_end(tmp_path, monkeypatch):
    running, done = slurm.JobState("7", "RUNNING"), slurm.JobState("7", "COMPLETED")
    end, said, _ = _wait(tmp_path, monkeypatch, [slurm.JobState("7", "PENDING", "Priority"), running, running, done])
    assert end.state == "COMPLETED" and said[0].endswith("queued (Priority), 0:00 so far")
    assert "nodes 0/1, pairs 0/1" in said[1]


def test_a_job_that_never_starts_is_left_queued_after_the_queue_limit(tmp_path, monkeypatch):
    end, _, waited = _wait(tmp_path, monkeypatch, [slurm.JobState("7", "PENDING", "ReqNodeNotAvail")])
    assert end.state == "PENDING" and "still queued after 10 minutes (Slurm: ReqNodeNotAvail)" in end.reason
    assert 600 <= waited <= 600 + submit.POLL_S * 2


def test_a_job_past_its_time_limit_is_left_to_slurm(tmp_path, monkeypatch):
    end, _, waited = _wait(tmp_path, monkeypatch, [slurm.JobState("7", "RUNNING")], minutes=1)
    assert end.state == "RUNNING" and "past its time limit" in end.reason
    assert 60 + submit.GRACE_S <= waited <= 60 + submit.GRACE_S + submit.POLL_S * 2
