"""Why a data-parallel learner failed. Its workers meet in collectives, so one worker's end fails the
others' calls too, and the error that reaches the driver first is often a collective's ("Connection closed
by peer"), which names no worker. The cause is a dead worker (named by its rank), or else the one error of
a worker's own among the group's calls."""

from __future__ import annotations

from typing import Any

from unstable_core.errors import root_cause
from unstable_core.learners.data_parallel import CollectiveFailed
from unstable_core.runtime.graph import ActorGraph
from unstable_core.runtime.recovery.liveness import ActorDied, death_reason

ANSWER_S = 30.0  # a live worker answers `pid` beside its train() call (max_concurrency 2)
SETTLE_S = 10.0  # for the other workers' calls to end once the group broke


def worker_name(rank: int) -> str:
    """How the run's messages name a learner worker: rank 0 is the learner, which writes the run folder."""
    return "the learner" if rank == 0 else f"the learner worker of rank {rank}"


def dead_worker(workers: list[Any], answer_s: float = ANSWER_S) -> ActorDied | None:
    """The first of `workers` (in rank order) that is dead, as ActorDied naming its rank; None if every one
    answers or is only slow."""
    import ray

    asked = [w.pid.remote() for w in workers]
    ray.wait(asked, num_returns=len(asked), timeout=answer_s)
    for rank, ref in enumerate(asked):
        try:
            ray.get(ref, timeout=0)
        except ray.exceptions.RayActorError as exc:
            return ActorDied(worker_name(rank), death_reason(exc))
        except ray.exceptions.GetTimeoutError:
            continue
    return None


def group_failure(
    graph: ActorGraph, calls: list[Any], failed: BaseException, settle_s: float = SETTLE_S
) -> BaseException:
    """What stopped a learner whose `train` call (one of `calls`, in rank order) raised `failed`: a dead
    worker (ActorDied), else the first error of a worker's own among the calls that ended within
    `settle_s` (a worker that fails aborts the group, so the others raise CollectiveFailed), else `failed`.
    A single learner's error is its own: `failed` as it is."""
    import ray

    workers = [graph.learner, *graph.learner_workers]
    if len(workers) < 2:
        return failed
    dead = dead_worker(workers)
    if dead is not None:
        return dead
    ray.wait(calls, num_returns=len(calls), timeout=settle_s)
    for ref in calls:
        try:
            ray.get(ref, timeout=0)
        except ray.exceptions.RayTaskError as exc:
            if not isinstance(root_cause(exc), CollectiveFailed):
                return exc
        except ray.exceptions.RayError:  # still running, or gone in a way dead_worker did not see
            continue
    return failed
