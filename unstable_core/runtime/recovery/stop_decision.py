"""How a run that must stop stops, from what stopped its wait: the one seam between an exception and the
run's end, a plain function (no Ray is started; Ray's exception classes are only compared), so that a new
kind of failure is one branch here and one test.

Two ends: an actor died, hung, or the pipeline stalled (`died`): the run stops without waiting for that
actor, records the event and says how to resume from its last complete checkpoint; any other failure of
the run's own (`failure`): the run stops cleanly and raises RunFailed with that one line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from unstable_core.errors import RunFailed, describe, root_cause
from unstable_core.runtime.recovery.liveness import FAILED_TO_START, ActorDied, death_reason, oom_reason
from unstable_core.runtime.recovery.resume import RESUME_HINT

DEBUG_HINT = " (rerun with --debug for the traceback)"


@attrs.frozen
class StopDecision:
    """The end of a run: after a death, or after a failure whose one line is `failure`."""

    died: ActorDied | None = None
    failure: str | None = None

    def line(self, run_dir: Path, step: int = 0) -> str:
        """The one line the run ends with; a death names the last complete checkpoint, `step`."""
        if self.died is None:
            return str(self.failure)
        fix = "fix that, then " if self.died.why.startswith(FAILED_TO_START) else ""
        return (
            f"{self.died.who} {self.died.what}; the run stopped at its last complete checkpoint (step {step}): "
            + fix
            + RESUME_HINT.format(run_dir=run_dir)
        )


def decide_stop(
    exc: BaseException,
    who: str,
    run_dir: Path,
    *,
    names: Mapping[str, str] | None = None,
    learner_failure: Callable[[BaseException], BaseException] | None = None,
    debug: bool = False,
) -> StopDecision | None:
    """The end of a run whose wait raised `exc` while it waited on `who` ("the learner", "collection", "an
    actor"). `names`: actor id -> name, for Ray's errors that carry only an id; `learner_failure`: what
    stopped a data-parallel learner, from its workers (`learner_group.group_failure`). None: `exc` is no
    failure of the run's, and goes on as it is."""
    from ray import exceptions as ray_errors

    if isinstance(exc, RunFailed):  # the run's own verdict: its games keep failing, ...
        return StopDecision(failure=str(exc))
    if isinstance(exc, ray_errors.OutOfMemoryError):  # not a RayTaskError: `who` was being waited on
        return StopDecision(died=ActorDied(who, oom_reason(exc)))
    if isinstance(exc, ray_errors.RayTaskError):
        return _task_failed(exc, who, run_dir, names, learner_failure, debug)
    if isinstance(exc, (ray_errors.RayActorError, ray_errors.GetTimeoutError, ActorDied)):
        return StopDecision(died=died_of(exc, names))
    return None


def _task_failed(
    exc: BaseException,
    who: str,
    run_dir: Path,
    names: Mapping[str, str] | None,
    learner_failure: Callable[[BaseException], BaseException] | None,
    debug: bool,
) -> StopDecision:
    """A call of the run's raised: its actor died meanwhile, a worker of the learner's group did, or it is
    the actor's own error (a full disk is fixed and resumed; anything else is rerun with --debug)."""
    from ray import exceptions as ray_errors

    cause = exc.cause if getattr(exc, "cause", None) is not None else exc
    if isinstance(cause, ray_errors.RayActorError):
        return StopDecision(died=died_of(cause, names))
    if who == "the learner" and learner_failure is not None:
        exc = learner_failure(exc)  # a dead worker, or the one error of a worker's own
        if isinstance(exc, ActorDied):
            return StopDecision(died=exc)
    hint = "" if debug else DEBUG_HINT
    if isinstance(root_cause(exc), OSError):  # the run folder became unwritable, the disk full, ...
        hint = ": fix that, then " + RESUME_HINT.format(run_dir=run_dir)
    return StopDecision(failure=f"run stopped: {who} failed: {describe(exc)}{hint}")


def died_of(exc: BaseException, names: Mapping[str, str] | None = None) -> ActorDied:
    """`exc` as the death of the actor it names (by its id in `names`), or of "an actor"."""
    if isinstance(exc, ActorDied):
        return exc
    actor_id = getattr(exc, "actor_id", None)
    who = (names or {}).get(actor_id or "", "an actor")
    return ActorDied(who, death_reason(exc) if actor_id else type(exc).__name__)
