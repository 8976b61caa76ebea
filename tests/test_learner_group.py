"""What stops a data-parallel learner: a dead worker named by its rank, or the one error of a worker's own
among the collective failures it caused in the others (real Ray actors standing where the workers would)."""

from __future__ import annotations

import os
import time

import pytest
import ray

from unstable_core.errors import describe
from unstable_core.learners.data_parallel import CollectiveFailed
from unstable_core.runtime.graph import ActorGraph
from unstable_core.runtime.recovery.learner_group import group_failure
from unstable_core.runtime.recovery.liveness import ActorDied
from unstable_core.testing import local_ray

BROKEN = "the learner group's all_gather failed (another worker died or left the group): Connection closed"


@pytest.fixture(scope="module")
def ray_session():
    with local_ray(num_cpus=2, namespace="unstable-learner-group"):
        yield


@ray.remote(num_cpus=0, max_concurrency=2)
class Worker:
    """A learner worker's `pid` and the end of its `train` call: its own error, or a collective's."""

    def pid(self) -> int:
        return os.getpid()

    def train(self, own: str | None = None, collective: bool = False) -> dict:
        if own:
            raise RuntimeError(own)
        if collective:
            raise CollectiveFailed(BROKEN)
        return {}


def group(n: int) -> tuple[ActorGraph, list]:
    workers = [Worker.remote() for _ in range(n)]
    ray.get([w.pid.remote() for w in workers])
    return ActorGraph(None, None, {}, learner=workers[0], learner_workers=workers[1:]), workers


def failure_of(calls: list) -> BaseException:
    for ref in calls:
        try:
            ray.get(ref)
        except ray.exceptions.RayError as exc:
            return exc
    raise AssertionError("no call failed")


def test_a_dead_worker_is_named_by_its_rank(ray_session):
    graph, (zero, one, two) = group(3)
    ray.kill(two, no_restart=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # ray.kill does not wait
        try:
            ray.get(two.pid.remote())
        except ray.exceptions.RayActorError:
            break
    calls = [zero.train.remote(collective=True), one.train.remote(collective=True)]
    found = group_failure(graph, calls, failure_of(calls), settle_s=5)
    assert isinstance(found, ActorDied)
    assert found.who == "the learner worker of rank 2"
    assert found.what == "actor died (its process died)"


@pytest.mark.parametrize("culprit", [0, 1])
def test_a_workers_own_error_wins_over_the_collective_failures_it_caused(ray_session, culprit):
    """Rank 0's own error surfaces though the driver saw rank 1's collective failure first, and the other
    way round: a follower's error though rank 0 saw only its collective fail."""
    graph, workers = group(2)
    own = f"rank {culprit} ran out of memory"
    calls = [
        w.train.remote(own=own) if rank == culprit else w.train.remote(collective=True)
        for rank, w in enumerate(workers)
    ]
    first = calls[1 - culprit]  # the collective failure, as the driver may see it first
    seen = failure_of([first])
    assert describe(seen).startswith("CollectiveFailed: the learner group's all_gather failed")
    found = group_failure(graph, calls, seen, settle_s=30)
    assert describe(found) == f"RuntimeError: {own}"


def test_a_single_learners_error_is_its_own(ray_session):
    graph, (zero,) = group(1)
    call = zero.train.remote(own="update failed")
    failed = failure_of([call])
    assert group_failure(graph, [call], failed) is failed
