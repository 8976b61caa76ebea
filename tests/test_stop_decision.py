"""The seam between what stopped a run's wait and how the run ends (`runtime/recovery/stop_decision.py`):
one test per branch, on Ray's real exception classes, with no Ray started."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray import exceptions as ray_errors

from unstable_core.errors import RunFailed, UnstableError
from unstable_core.runtime.recovery.liveness import FAILED_TO_START, ActorDied, ActorHung
from unstable_core.runtime.recovery.stall import PipelineStalled
from unstable_core.runtime.recovery.stop_decision import StopDecision, decide_stop

RUN_DIR = Path("/runs/r1")
NAMES = {"a1b2": "inference actor 0 of main", "c3d4": "the learner"}


def task_error(cause: BaseException, actor_id: str | None = None) -> ray_errors.RayTaskError:
    return ray_errors.RayTaskError(
        "train", "Traceback (most recent call last): ...", cause, actor_id=actor_id
    )


def test_the_runs_own_verdict_stops_it_cleanly_with_that_line():
    decision = decide_stop(RunFailed("run stopped: 12 of 20 games failed"), "collection", RUN_DIR)
    assert decision == StopDecision(failure="run stopped: 12 of 20 games failed")
    assert decision.line(RUN_DIR) == "run stopped: 12 of 20 games failed"


def test_rays_memory_monitor_is_the_death_of_the_actor_waited_on():
    exc = ray_errors.OutOfMemoryError("Task was killed: Memory on the node was 7.50GB used / 8.00GB limit")
    died = decide_stop(exc, "the learner", RUN_DIR).died
    assert (died.who, died.why.startswith("killed by Ray: the machine ran out of memory")) == (
        "the learner",
        True,
    )
    assert "7.50GB of 8.00GB used" in died.why


def test_a_call_whose_actor_died_is_that_actors_death_by_its_name():
    exc = task_error(ray_errors.RayActorError(actor_id="a1b2"))
    decision = decide_stop(exc, "collection", RUN_DIR, names=NAMES)
    assert (decision.died.who, decision.died.why) == ("inference actor 0 of main", "its process died")
    assert decision.line(RUN_DIR, step=4) == (
        "inference actor 0 of main actor died (its process died); the run stopped at its last complete "
        "checkpoint (step 4): continue it with `unstable run --resume /runs/r1`"
    )


def test_a_learner_whose_worker_died_is_that_workers_death():
    dead = ActorDied("the learner worker of rank 1", "its process died")
    exc = task_error(RuntimeError("Connection closed by peer"))
    decision = decide_stop(exc, "the learner", RUN_DIR, learner_failure=lambda failed: dead)
    assert decision.died is dead


def test_a_learners_own_error_stops_the_run_with_it_and_the_debug_hint():
    exc = task_error(UnstableError("loss is not finite in 3 updates in a row"))
    decision = decide_stop(exc, "the learner", RUN_DIR, learner_failure=lambda failed: failed)
    assert decision.died is None
    assert decision.failure == (
        "run stopped: the learner failed: loss is not finite in 3 updates in a row (rerun with --debug for "
        "the traceback)"
    )
    assert "--debug" not in decide_stop(exc, "the learner", RUN_DIR, debug=True).failure


def test_a_full_disk_says_to_fix_it_and_resume():
    exc = task_error(OSError(28, "No space left on device"))
    failure = decide_stop(exc, "collection", RUN_DIR).failure
    assert failure.startswith("run stopped: collection failed: ")
    assert failure.endswith(": fix that, then continue it with `unstable run --resume /runs/r1`")


@pytest.mark.parametrize(
    ("exc", "who", "why"),
    [
        (ray_errors.RayActorError(actor_id="c3d4"), "the learner", "its process died"),
        (
            ray_errors.RayActorError(actor_id="c3d4", error_msg="x\nConfigError: bad adapter", actor_init_failed=True),
            "the learner",
            FAILED_TO_START + "bad adapter",
        ),
        (ray_errors.GetTimeoutError("timed out"), "an actor", "GetTimeoutError"),
    ],
)  # fmt: skip
def test_rays_errors_of_a_dead_or_silent_actor_are_deaths(exc, who, why):
    died = decide_stop(exc, "collection", RUN_DIR, names=NAMES).died
    assert (died.who, died.why) == (who, why)


def test_a_death_that_failed_to_start_says_to_fix_it_first():
    died = ActorDied("the learner", FAILED_TO_START + "bad adapter")
    assert ": fix that, then continue it" in decide_stop(died, "the learner", RUN_DIR).line(RUN_DIR, 2)


@pytest.mark.parametrize(
    "died",
    [
        ActorDied("a collector", "it stopped collecting"),
        ActorHung("the buffer", 300.0),
        PipelineStalled("no batch"),
    ],
)
def test_the_runs_own_liveness_verdicts_are_deaths_as_they_are(died):
    assert decide_stop(died, "collection", RUN_DIR).died is died


def test_anything_else_is_no_failure_of_the_runs_and_goes_on():
    assert decide_stop(KeyError("x"), "collection", RUN_DIR) is None
